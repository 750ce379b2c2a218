//! One self-contained HTML page: the recording's header, an interactive flame graph
//! (click to zoom, regex search, colour by any window metric on a legend scale), the
//! callers, callees and per-line sample counts of a selected function, and the metrics
//! table with error bars (sortable, filterable). It needs no network: the styles and the
//! script are in the page (`html/page.html`, written for strobe, no library), and the
//! report is a JSON document inside a `<script type="application/json">` tag, rendered by
//! the script when the page opens.
//!
//! The page checks itself when opened as `page.html#selftest`: it selects the hottest
//! function that has a caller, reads back its callers and callees, filters the table, and
//! writes the results with every script error and `console.error` it caught into a
//! `<pre id="selftest">` (what `chromium --headless --dump-dom` prints).
//!
//! Size: the data is one row per function and one array per distinct call path, so it
//! grows with the program's code paths, not with the number of samples.
//!
//! Owns: the page and the JSON it embeds. Must never compute metrics itself.

use std::io::Write;

use serde_json::{json, Value};

use crate::render::summary_lines;
use crate::report::Report;
use crate::stats::Estimate;
use crate::ReportError;

const PAGE: &str = include_str!("html/page.html");
const SLOT: &str = "/*STROBE_DATA*/";

/// A value rounded to 5 significant-ish decimals (the page shows at most 3).
fn r(v: f64) -> Value {
    if v.is_finite() {
        json!((v * 1e5).round() / 1e5)
    } else {
        Value::Null
    }
}

fn est(e: Option<Estimate>) -> Value {
    match e {
        Some(e) => json!([r(e.value), r(e.low), r(e.high)]),
        None => Value::Null,
    }
}

/// The JSON document the page renders.
pub fn data(report: &Report, file: Option<&str>) -> Value {
    let metrics = report.metrics();
    let functions: Vec<Value> = report
        .functions
        .iter()
        .map(|f| {
            let mv: Vec<Value> =
                metrics.iter().map(|m| est(report.metric_estimate(f, m))).collect();
            json!({
                "n": f.function,
                "m": f.module,
                "s": f.samples,
                "t": f.total_samples,
                "w": f.windows,
                "tp": est(Some(report.time_estimate(f))),
                "src": f.source,
                "lines": f.lines.iter().take(200).map(|(l, n)| json!([l, n])).collect::<Vec<_>>(),
                "mv": mv,
            })
        })
        .collect();
    // A path is its frames then its samples: [f0, f1, ..., samples].
    let paths: Vec<Value> = report
        .paths
        .iter()
        .filter(|p| p.samples > 0 && !p.frames.is_empty())
        .map(|p| {
            let mut v: Vec<u64> = p.frames.iter().map(|&f| f as u64).collect();
            v.push(p.samples);
            json!(v)
        })
        .collect();
    json!({
        "header": {
            "command": report.info.command.join(" "),
            "lines": summary_lines(report, file),
            "events": report.info.events,
            "period": report.info.period,
            "window": report.info.window,
            "samples": report.samples,
            "lost_samples": report.lost_samples,
        },
        "metrics": metrics.iter().map(|m| json!({
            "key": m.key, "header": m.header, "description": m.description, "decimals": m.decimals,
        })).collect::<Vec<_>>(),
        "functions": functions,
        "paths": paths,
    })
}

/// Writes the page for `report` to `out`; `file` names the recording in the header.
pub fn write<W: Write>(report: &Report, file: Option<&str>, out: W) -> Result<(), ReportError> {
    write_with(report, file, None, out)
}

/// [`write()`], the flame graph first coloured by the metric `color_by` (key or header).
pub fn write_with<W: Write>(
    report: &Report,
    file: Option<&str>,
    color_by: Option<&str>,
    mut out: W,
) -> Result<(), ReportError> {
    let mut doc = data(report, file);
    if let Some(m) = color_by {
        let key = crate::flamegraph::find_metric(report, m)?.key;
        doc["colour_by"] = json!(key);
    }
    let json =
        serde_json::to_string(&doc).map_err(|e| ReportError::write("the HTML page", e.into()))?;
    // Inside a script element only `</` could end it early (`</script>`); `<\/` is the
    // same JSON string.
    let json = json.replace("</", "<\\/");
    let (head, tail) = PAGE.split_once(SLOT).unwrap_or((PAGE, ""));
    let mut w = std::io::BufWriter::new(&mut out);
    w.write_all(head.as_bytes())
        .and_then(|()| w.write_all(json.as_bytes()))
        .and_then(|()| w.write_all(tail.as_bytes()))
        .and_then(|()| w.flush())
        .map_err(|e| ReportError::write("the HTML page", e))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_has_one_data_slot_and_loads_nothing_from_the_network() {
        assert_eq!(super::PAGE.matches(super::SLOT).count(), 1);
        for needle in ["http://", "https://", "src=\"//", "@import"] {
            assert!(!super::PAGE.contains(needle), "the page refers to {needle}");
        }
    }
}
