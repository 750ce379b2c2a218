//! Flame graphs: the report's call paths drawn as an interactive, self-contained SVG by
//! inferno (click to zoom, Ctrl-F to search), optionally coloured by a window metric.
//!
//! With [`FlameOptions::color_by`], every frame of a function is filled by that
//! function's value of the metric over all its windows (faults/ms, CPI, ...) on a
//! blue-yellow-red scale from the lowest to the highest value among functions with
//! enough windows; functions with no windows are grey. A legend (the scale with its ends)
//! is drawn under the title, and each frame's tooltip adds the metric with its 95%
//! interval. Width is still time: the picture says where the time goes *and* what the
//! code was doing there.
//!
//! [`diff_flamegraph`] draws a differential flame graph (inferno's: the new run's shape,
//! red where a path grew, blue where it shrank, the base normalized to the new run's
//! total).
//!
//! Owns: folded input for inferno, the palette and legend. Must never compute metrics
//! itself: values come from [`Report::metric_estimate`].

use std::io::Write;

use inferno::flamegraph::color::{Color, PaletteMap};
use inferno::flamegraph::{self as fg, Options};
use rustc_hash::FxHashMap;

use crate::calltree::folded;
use crate::metrics::MetricDef;
use crate::report::Report;
use crate::stats::FEW_WINDOWS;
use crate::ReportError;

/// How to draw a flame graph.
#[derive(Debug, Clone, Default)]
pub struct FlameOptions {
    /// The title; `None`: "Flame Graph: " and the command.
    pub title: Option<String>,
    /// Colour each function by this metric (one of [`Report::metrics`]).
    pub color_by: Option<&'static MetricDef>,
    /// Width by this counter's window total (index into the recording's events) instead
    /// of by samples.
    pub counter: Option<usize>,
    /// Image width in pixels; `None`: inferno's 1200.
    pub width: Option<usize>,
}

/// The metric named `name` (key or header, any case) among those `report` supports, or a
/// one-line error saying what exists or what is missing.
pub fn find_metric(report: &Report, name: &str) -> Result<&'static MetricDef, ReportError> {
    let want = name.trim();
    let matches =
        |m: &MetricDef| m.key.eq_ignore_ascii_case(want) || m.header.eq_ignore_ascii_case(want);
    if let Some(m) = report.metrics().into_iter().find(|m| matches(m)) {
        return Ok(m);
    }
    if let Some(m) = crate::metrics::METRICS.iter().find(|m| matches(m)) {
        let needs: Vec<&str> =
            m.formula.needs().iter().map(|c| crate::metrics::counter_name(*c)).collect();
        return Err(ReportError::MetricNotRecorded {
            metric: want.to_string(),
            needs: needs.join(", "),
        });
    }
    let keys: Vec<String> =
        report.metrics().iter().map(|m| format!("{} ({})", m.key, m.header)).collect();
    Err(ReportError::UnknownMetric {
        metric: want.to_string(),
        choices: if keys.is_empty() {
            "none: no counters were recorded".into()
        } else {
            keys.join(", ")
        },
    })
}

/// The colour scale's ends: `(low, high)` over the functions with at least
/// `FEW_WINDOWS` (30) windows (so that one window's extreme value does not flatten the
/// scale), or over every function with a value when those few span no range.
pub fn scale(report: &Report, m: &MetricDef) -> Option<(f64, f64)> {
    let values = |min_windows: u64| -> Vec<f64> {
        report
            .functions
            .iter()
            .filter(|f| f.windows >= min_windows)
            .filter_map(|f| report.metric(f, m))
            .filter(|v| v.is_finite())
            .collect()
    };
    let range = |v: Vec<f64>| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
    };
    match range(values(FEW_WINDOWS)) {
        Some((lo, hi)) if hi > lo => Some((lo, hi)),
        _ => range(values(1)),
    }
}

/// Blue (0) through pale yellow (0.5) to red (1): a diverging scale readable by people
/// with the common colour-vision deficiencies.
pub fn ramp(t: f64) -> Color {
    const STOPS: [(f64, [f64; 3]); 5] = [
        (0.0, [69.0, 117.0, 180.0]),
        (0.25, [116.0, 173.0, 209.0]),
        (0.5, [255.0, 255.0, 191.0]),
        (0.75, [244.0, 109.0, 67.0]),
        (1.0, [165.0, 0.0, 38.0]),
    ];
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 };
    let mut c = STOPS[0].1;
    for w in STOPS.windows(2) {
        let ((t0, a), (t1, b)) = (w[0], w[1]);
        if t >= t0 && t <= t1 {
            let u = (t - t0) / (t1 - t0);
            c = [a[0] + (b[0] - a[0]) * u, a[1] + (b[1] - a[1]) * u, a[2] + (b[2] - a[2]) * u];
            break;
        }
    }
    Color { r: c[0].round() as u8, g: c[1].round() as u8, b: c[2].round() as u8 }
}

/// The grey of functions with no value.
pub const NO_VALUE: Color = Color { r: 200, g: 200, b: 200 };

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The name a function has in folded lines (and so in the SVG).
fn folded_name(name: &str) -> String {
    name.replace([';', '\n'], "_")
}

/// Writes `report`'s flame graph as SVG to `out`.
pub fn flamegraph<W: Write>(
    report: &Report,
    opts: &FlameOptions,
    out: W,
) -> Result<(), ReportError> {
    let text = folded(report, opts.counter);
    let mut o = Options::default();
    o.title = opts.title.clone().unwrap_or_else(|| title(report));
    o.image_width = opts.width;
    o.count_name = match opts.counter {
        Some(c) => report.info.events.get(c).cloned().unwrap_or_else(|| "events".into()),
        None => "samples".into(),
    };
    o.deterministic = true;
    no_samples(&text)?;
    let Some(m) = opts.color_by else {
        return render(&mut o, &text, out);
    };
    let range = scale(report, m);
    let mut palette = PaletteMap::default();
    let mut tips: FxHashMap<String, String> = FxHashMap::default();
    for f in &report.functions {
        let name = folded_name(&f.function);
        let e = report.metric_estimate(f, m);
        let color = match (e, range) {
            (Some(e), Some((lo, hi))) => ramp(if hi > lo {
                (e.value - lo) / (hi - lo)
            } else {
                0.5 + (e.value - lo).signum() / 2.0
            }),
            _ => NO_VALUE,
        };
        palette.insert(&name, color);
        let tip = match e {
            Some(e) => {
                let half = (e.high - e.value).max(e.value - e.low);
                let half = if half.is_finite() {
                    format!("{half:.*}", m.decimals)
                } else {
                    "?".to_string()
                };
                format!(
                    ", {} {:.*}±{half} over {} windows",
                    m.header, m.decimals, e.value, f.windows
                )
            }
            None => format!(", {}: no windows", m.header),
        };
        tips.insert(esc(&name), tip);
    }
    o.palette_map = Some(&mut palette);
    // Short, so that the centred subtitle leaves the right of its line to the legend.
    o.subtitle = Some(format!("colour: {} of each function (grey: no windows)", m.header));
    let legend = range.map(|(lo, hi)| legend(m, lo, hi, opts.width.unwrap_or(1200), o.font_size));
    let mut svg = Vec::new();
    fg::from_lines(&mut o, text.lines(), &mut svg)
        .map_err(|e| ReportError::write("the flame graph", e))?;
    let svg = String::from_utf8_lossy(&svg);
    let svg = with_tooltips(&svg, &tips);
    finish(svg, legend.as_deref(), out)
}

fn title(report: &Report) -> String {
    if report.info.command.is_empty() {
        "Flame Graph".to_string()
    } else {
        format!("Flame Graph: {}", report.info.command.join(" "))
    }
}

fn no_samples(text: &str) -> Result<(), ReportError> {
    if text.is_empty() {
        return Err(ReportError::write(
            "the flame graph",
            std::io::Error::new(std::io::ErrorKind::InvalidData, "the recording has no samples"),
        ));
    }
    Ok(())
}

fn render<W: Write>(o: &mut Options<'_>, text: &str, mut out: W) -> Result<(), ReportError> {
    no_samples(text)?;
    fg::from_lines(o, text.lines(), &mut out).map_err(|e| ReportError::write("the flame graph", e))
}

fn finish<W: Write>(svg: String, legend: Option<&str>, mut out: W) -> Result<(), ReportError> {
    let body = match (legend, svg.rfind("</svg>")) {
        (Some(l), Some(at)) => format!("{}{l}{}", &svg[..at], &svg[at..]),
        _ => svg,
    };
    out.write_all(body.as_bytes()).map_err(|e| ReportError::write("the flame graph", e))
}

/// Adds each function's metric to its frames' tooltips, inside the parentheses
/// (`<title>name (N samples, P%)</title>` becomes `<title>name (N samples, P%, faults/ms
/// 12.3±0.4 over 80 windows)</title>`): inferno's script takes a frame's label from its
/// title without the last parenthesized group, so the label stays the name.
fn with_tooltips(svg: &str, tips: &FxHashMap<String, String>) -> String {
    let mut out = String::with_capacity(svg.len() + svg.len() / 8);
    let mut rest = svg;
    while let Some(at) = rest.find("<title>") {
        let (head, tail) = rest.split_at(at + "<title>".len());
        out.push_str(head);
        let Some(end) = tail.find("</title>") else {
            rest = tail;
            break;
        };
        let title = &tail[..end];
        match (title.rfind(" (").and_then(|i| tips.get(&title[..i])), title.strip_suffix(')')) {
            (Some(tip), Some(head)) => {
                out.push_str(head);
                out.push_str(&esc(tip));
                out.push(')');
            }
            _ => out.push_str(title),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// The legend: a gradient bar from the low end to the high end, at the right of the
/// subtitle line.
fn legend(m: &MetricDef, lo: f64, hi: f64, width: usize, font: usize) -> String {
    let bar_w = 180.0;
    let x = width as f64 - 10.0 - bar_w - 60.0;
    let y = (font * 4) as f64 - font as f64 * 0.8;
    let mut stops = String::new();
    for i in 0..=10 {
        let t = i as f64 / 10.0;
        let c = ramp(t);
        stops.push_str(&format!(
            "<stop offset=\"{:.0}%\" stop-color=\"rgb({},{},{})\"/>",
            t * 100.0,
            c.r,
            c.g,
            c.b
        ));
    }
    let d = m.decimals;
    format!(
        "<g id=\"strobe-legend\"><defs><linearGradient id=\"strobe-scale\">{stops}</linearGradient></defs>\
<text x=\"{lx:.1}\" y=\"{ty:.1}\" text-anchor=\"end\" font-size=\"{fs}\" font-family=\"Verdana\">{lo:.d$}</text>\
<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bar_w}\" height=\"{h}\" fill=\"url(#strobe-scale)\" stroke=\"#888\"/>\
<text x=\"{rx:.1}\" y=\"{ty:.1}\" font-size=\"{fs}\" font-family=\"Verdana\">{hi:.d$}</text>\
<title>{name}: {lo:.d$} (blue) to {hi:.d$} (red)</title></g>",
        lx = x - 4.0,
        rx = x + bar_w + 4.0,
        ty = y + font as f64 * 0.8,
        h = font,
        fs = font,
        name = esc(m.header),
    )
}

/// Writes a differential flame graph of `base` against `new` (inferno's colouring: red
/// where a path takes more of the new run, blue where less; the base normalized to the
/// new run's total).
pub fn diff_flamegraph<W: Write>(
    base: &Report,
    new: &Report,
    opts: &FlameOptions,
    out: W,
) -> Result<(), ReportError> {
    let (a, b) = (folded(base, opts.counter), folded(new, opts.counter));
    let mut lines = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options { normalize: true, strip_hex: false },
        a.as_bytes(),
        b.as_bytes(),
        &mut lines,
    )
    .map_err(|e| ReportError::write("the differential flame graph", e))?;
    let text = String::from_utf8_lossy(&lines).into_owned();
    let mut o = Options::default();
    o.title = opts.title.clone().unwrap_or_else(|| format!("Differential {}", title(new)));
    o.subtitle = Some("red: more of the new run's time than the base's; blue: less".into());
    o.image_width = opts.width;
    o.deterministic = true;
    render(&mut o, &text, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ramp_runs_blue_to_red_and_clamps() {
        assert_eq!(ramp(0.0), Color { r: 69, g: 117, b: 180 });
        assert_eq!(ramp(1.0), Color { r: 165, g: 0, b: 38 });
        assert_eq!(ramp(0.5), Color { r: 255, g: 255, b: 191 });
        assert_eq!(ramp(-3.0), ramp(0.0));
        assert_eq!(ramp(7.0), ramp(1.0));
        assert_eq!(ramp(f64::NAN), ramp(0.0));
    }

    #[test]
    fn tooltips_gain_the_metric_of_their_function_only() {
        let mut tips = FxHashMap::default();
        tips.insert("a&amp;b".to_string(), ", faults/ms 3.0±0.5 over 40 windows".to_string());
        let svg = "<g><title>a&amp;b (10 samples, 50%)</title></g><g><title>c (5 samples, 25%)</title></g>";
        let out = with_tooltips(svg, &tips);
        assert_eq!(
            out,
            "<g><title>a&amp;b (10 samples, 50%, faults/ms 3.0±0.5 over 40 windows)</title></g>\
             <g><title>c (5 samples, 25%)</title></g>"
        );
    }
}
