//! From strobe reports to one `ExportProfilesServiceRequest`: a resource per process,
//! a dictionary shared by all of them, and one profile per sample type.
//!
//! What a request holds, per process (one strobe-report [`Report`] each):
//!
//! - `cpu`/`nanoseconds` (or `samples`/`count` when the sampling leader does not count
//!   time): the time samples on each call path, each worth one sampling cycle (the
//!   `period`, in whole nanoseconds, so `value / period` is the sample count exactly).
//!   Samples carry the thread's name (`thread.name`) when the recording knows it; the
//!   report's `[not sampled]` row (CPU time before sampling was armed) has no thread.
//! - `strobe.window.EVENT` (`nanoseconds` for a clock, `count` otherwise), one profile per
//!   counter of the group: the net counts (baseline subtracted) summed over the windows
//!   that began and ended in the path's leaf function, rounded to integers. The clock's
//!   profile is the windows' net nanoseconds: a backend sums a counter and the clock over
//!   any set of stacks and divides, which gives strobe's rate for that set (rates are not
//!   additive, counts are). These samples carry no thread: the report attributes windows
//!   to call paths of the whole process.
//! - `strobe.windows`/`count`: how many windows each path's sums rest on.
//! - `off_cpu`/`nanoseconds` when the recording has off-CPU intervals.
//!
//! Locations are per function (the report's paths are function paths), with the
//! function's most sampled line; a function named from its FDE (`lib.so+0x3a40`, a
//! stripped file) gets that link-time address as its location's address, and every
//! mapping names its file and carries its GNU build id (`process.executable.build_id.gnu`),
//! so a server with the debug files can name it.
//!
//! Owns: the mapping from reports to OTLP messages. Must never compute a metric (the
//! values are the report's sums) or do I/O beyond reading build ids.

use std::path::Path;

use rustc_hash::FxHashMap;
use strobe_report::metrics::Counter;
use strobe_report::Report;

use crate::proto::*;

/// The attribute key of a mapping's GNU build id (hex), as the semantic conventions name it.
pub const BUILD_ID_KEY: &str = "process.executable.build_id.gnu";
/// The sample attribute naming the thread.
pub const THREAD_NAME_KEY: &str = "thread.name";
/// The location attribute saying what kind of frame it is.
pub const FRAME_TYPE_KEY: &str = "profile.frame.type";
/// The prefix of the window counters' sample types.
pub const WINDOW_PREFIX: &str = "strobe.window.";
/// The sample type counting windows.
pub const WINDOWS_TYPE: &str = "strobe.windows";

/// One process's part of a request.
#[derive(Debug)]
pub struct ProcessProfile<'a> {
    /// The process's report (built with a timeline, for the thread split; without one
    /// the CPU samples carry no thread).
    pub report: &'a Report,
    /// The resource's attributes.
    pub resource: Vec<KeyValue>,
    /// Start of the profiled range, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// Its length, ns.
    pub duration_ns: u64,
}

impl<'a> ProcessProfile<'a> {
    /// The part of process `p` (its resource from `cfg`) over `[start_unix_ns, +duration_ns)`.
    pub fn new(
        report: &'a Report,
        cfg: &crate::resource::ResourceConfig,
        p: &crate::resource::ProcessFacts,
        start_unix_ns: u64,
        duration_ns: u64,
    ) -> ProcessProfile<'a> {
        ProcessProfile {
            report,
            resource: crate::resource::attributes(cfg, p),
            start_unix_ns,
            duration_ns,
        }
    }
}

/// Interning tables for the dictionary, entry 0 the zero value.
#[derive(Default)]
struct Dict {
    d: ProfilesDictionary,
    strings: FxHashMap<String, i32>,
    functions: FxHashMap<(i32, i32), i32>,
    mappings: FxHashMap<String, i32>,
    locations: FxHashMap<(i32, i32, i64, u64, i32), i32>,
    stacks: FxHashMap<Vec<i32>, i32>,
    attributes: FxHashMap<(i32, String), i32>,
}

impl Dict {
    fn new() -> Dict {
        let mut d = Dict::default();
        d.d.string_table.push(String::new());
        d.d.mapping_table.push(Mapping::default());
        d.d.location_table.push(Location::default());
        d.d.function_table.push(Function::default());
        d.d.link_table.push(Link { trace_id: vec![0; 16], span_id: vec![0; 8] });
        d.d.attribute_table.push(KeyValueAndUnit::default());
        d.d.stack_table.push(Stack::default());
        d
    }

    fn string(&mut self, s: &str) -> i32 {
        if s.is_empty() {
            return 0;
        }
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn attribute(&mut self, key: &str, value: &str) -> i32 {
        let k = self.string(key);
        if let Some(&i) = self.attributes.get(&(k, value.to_string())) {
            return i;
        }
        let i = self.d.attribute_table.len() as i32;
        self.d.attribute_table.push(KeyValueAndUnit {
            key_strindex: k,
            value: Some(AnyValue::String(value.to_string())),
            unit_strindex: 0,
        });
        self.attributes.insert((k, value.to_string()), i);
        i
    }

    fn mapping(&mut self, path: &str) -> i32 {
        if path.is_empty() {
            return 0;
        }
        if let Some(&i) = self.mappings.get(path) {
            return i;
        }
        let build_id = path
            .starts_with('/')
            .then(|| strobe_target::debuginfo::build_id(Path::new(path)).ok().flatten())
            .flatten()
            .map(|b| hex(&b));
        let attribute_indices = match build_id {
            Some(b) if !b.is_empty() => vec![self.attribute(BUILD_ID_KEY, &b)],
            _ => Vec::new(),
        };
        let i = self.d.mapping_table.len() as i32;
        let filename_strindex = self.string(path);
        self.d.mapping_table.push(Mapping {
            filename_strindex,
            attribute_indices,
            ..Default::default()
        });
        self.mappings.insert(path.to_string(), i);
        i
    }

    fn function(&mut self, name: &str, file: &str) -> i32 {
        let key = (self.string(name), self.string(file));
        if let Some(&i) = self.functions.get(&key) {
            return i;
        }
        let i = self.d.function_table.len() as i32;
        self.d.function_table.push(Function {
            name_strindex: key.0,
            system_name_strindex: key.0,
            filename_strindex: key.1,
            start_line: 0,
        });
        self.functions.insert(key, i);
        i
    }

    fn location(&mut self, f: &strobe_report::FunctionStats) -> i32 {
        let (file, line) = f.source.as_deref().map_or(("", 0), split_source);
        let function = self.function(&f.function, file);
        let mapping = self.mapping(&f.module_path);
        let address = fde_address(&f.function).unwrap_or(0);
        let kind = if f.module == "[kernel]" || f.module_path.starts_with("[kernel") {
            "kernel"
        } else {
            "native"
        };
        let frame_type = self.attribute(FRAME_TYPE_KEY, kind);
        let key = (function, mapping, line, address, frame_type);
        if let Some(&i) = self.locations.get(&key) {
            return i;
        }
        let i = self.d.location_table.len() as i32;
        self.d.location_table.push(Location {
            mapping_index: mapping,
            address,
            lines: vec![Line { function_index: function, line, column: 0 }],
            attribute_indices: vec![frame_type],
        });
        self.locations.insert(key, i);
        i
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = self.d.stack_table.len() as i32;
        self.d.stack_table.push(Stack { location_indices: locations.clone() });
        self.stacks.insert(locations, i);
        i
    }

    fn value_type(&mut self, ty: &str, unit: &str) -> ValueType {
        ValueType { type_strindex: self.string(ty), unit_strindex: self.string(unit) }
    }
}

/// Splits `file:line` at the last colon.
fn split_source(source: &str) -> (&str, i64) {
    match source.rsplit_once(':') {
        Some((file, line)) => match line.parse() {
            Ok(n) => (file, n),
            Err(_) => (source, 0),
        },
        None => (source, 0),
    }
}

/// The link-time address in a name the report gave a function of a stripped file from
/// its FDE (`<module>+0x<start>`).
fn fde_address(name: &str) -> Option<u64> {
    let (_, hex) = name.rsplit_once("+0x")?;
    u64::from_str_radix(hex, 16).ok()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The whole sampling cycle one time sample stands for, in whole ns, when the leader
/// counts time (the value's unit is then nanoseconds, and value / period the samples).
pub fn cpu_period(report: &Report) -> Option<i64> {
    strobe_report::pprof::sample_ns(report).map(|c| (c.round() as i64).max(1))
}

/// The sample type a window counter's profile has: (type, unit).
pub fn window_type(event: &str) -> (String, &'static str) {
    let unit = if Counter::from_event_name(event) == Some(Counter::Time) {
        "nanoseconds"
    } else {
        "count"
    };
    (format!("{WINDOW_PREFIX}{event}"), unit)
}

/// Builds the request for `parts`, naming the producer `strobe` at `version`.
pub fn build(parts: &[ProcessProfile<'_>], version: &str) -> ExportProfilesServiceRequest {
    let mut dict = Dict::new();
    let mut req = ExportProfilesServiceRequest::default();
    for part in parts {
        let profiles = process_profiles(&mut dict, part);
        req.resource_profiles.push(ResourceProfiles {
            resource: Some(Resource {
                attributes: part.resource.clone(),
                dropped_attributes_count: 0,
            }),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "strobe".into(),
                    version: version.into(),
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    req.dictionary = Some(dict.d);
    req
}

fn process_profiles(dict: &mut Dict, part: &ProcessProfile<'_>) -> Vec<Profile> {
    let report = part.report;
    let locations: Vec<i32> = report.functions.iter().map(|f| dict.location(f)).collect();
    // Each path's stack, leaf first (0 for an empty path).
    let stacks: Vec<i32> = report
        .paths
        .iter()
        .map(|p| {
            let locs: Vec<i32> =
                p.frames.iter().rev().filter_map(|&f| locations.get(f).copied()).collect();
            if locs.is_empty() {
                0
            } else {
                dict.stack(locs)
            }
        })
        .collect();
    let empty = |dict: &mut Dict, ty: &str, unit: &str| Profile {
        sample_type: dict.value_type(ty, unit),
        time_unix_nano: part.start_unix_ns,
        duration_nano: part.duration_ns,
        ..Default::default()
    };
    let mut out = Vec::new();

    // CPU time: per (path, thread) from the time line, the rest of each path without.
    let period = cpu_period(report);
    let mut cpu = match period {
        Some(_) => empty(dict, "cpu", "nanoseconds"),
        None => empty(dict, "samples", "count"),
    };
    match period {
        Some(p) => {
            cpu.period_type = Some(dict.value_type("cpu", "nanoseconds"));
            cpu.period = p;
        }
        None => {
            let leader = report.info.events.first().map_or("samples", String::as_str);
            cpu.period_type = Some(dict.value_type(leader, "count"));
            cpu.period = report.info.period as i64;
        }
    }
    let worth = period.unwrap_or(1);
    let mut by_thread: FxHashMap<(u32, u32), u64> = FxHashMap::default();
    let mut thread_attr: Vec<Option<i32>> = Vec::new();
    if let Some(tl) = &report.timeline {
        thread_attr = tl
            .threads
            .iter()
            .map(|t| {
                t.name
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .map(|n| dict.attribute(THREAD_NAME_KEY, n))
            })
            .collect();
        for s in &tl.samples {
            *by_thread.entry((s.path, s.thread)).or_insert(0) += 1;
        }
    }
    // Threads with one name share a sample.
    let mut per_path: Vec<FxHashMap<Option<i32>, u64>> =
        vec![FxHashMap::default(); report.paths.len()];
    for (&(path, thread), &n) in &by_thread {
        let attr = thread_attr.get(thread as usize).copied().flatten();
        if let Some(m) = per_path.get_mut(path as usize) {
            *m.entry(attr).or_insert(0) += n;
        }
    }
    for (i, path) in report.paths.iter().enumerate() {
        if stacks[i] == 0 {
            continue;
        }
        let split = &per_path[i];
        let threaded: u64 = split.values().sum();
        let mut entries: Vec<(Option<i32>, u64)> = split.iter().map(|(&a, &n)| (a, n)).collect();
        // Samples the time line does not place (the unsampled row) carry no thread.
        if path.samples > threaded {
            entries.push((None, path.samples - threaded));
        }
        entries.sort_unstable();
        let mut merged: Vec<(Option<i32>, u64)> = Vec::new();
        for (a, n) in entries {
            match merged.last_mut() {
                Some((b, m)) if *b == a => *m += n,
                _ => merged.push((a, n)),
            }
        }
        for (attr, n) in merged {
            if n == 0 {
                continue;
            }
            cpu.samples.push(Sample {
                stack_index: stacks[i],
                attribute_indices: attr.into_iter().collect(),
                values: vec![n as i64 * worth],
                ..Default::default()
            });
        }
    }
    out.push(cpu);

    // Window counters, their window counts.
    if report.windows_used > 0 {
        for (k, event) in report.info.events.iter().enumerate() {
            let (ty, unit) = window_type(event);
            let mut p = empty(dict, &ty, unit);
            for (i, path) in report.paths.iter().enumerate() {
                if stacks[i] == 0 || path.sums.n == 0 {
                    continue;
                }
                let v = path.sums.sums.get(k).copied().unwrap_or(0.0).round() as i64;
                p.samples.push(Sample {
                    stack_index: stacks[i],
                    values: vec![v],
                    ..Default::default()
                });
            }
            out.push(p);
        }
        let mut p = empty(dict, WINDOWS_TYPE, "count");
        for (i, path) in report.paths.iter().enumerate() {
            if stacks[i] == 0 || path.sums.n == 0 {
                continue;
            }
            p.samples.push(Sample {
                stack_index: stacks[i],
                values: vec![path.sums.n as i64],
                ..Default::default()
            });
        }
        out.push(p);
    }

    if report.off_cpu.is_some() {
        let mut p = empty(dict, "off_cpu", "nanoseconds");
        for (i, path) in report.paths.iter().enumerate() {
            if stacks[i] == 0 || path.off_cpu_ns == 0 {
                continue;
            }
            p.samples.push(Sample {
                stack_index: stacks[i],
                values: vec![path.off_cpu_ns as i64],
                ..Default::default()
            });
        }
        out.push(p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fde_names_give_their_address() {
        assert_eq!(fde_address("libz.so.1+0x3a40"), Some(0x3a40));
        assert_eq!(fde_address("main"), None);
        assert_eq!(fde_address("a+0xzz"), None);
    }

    #[test]
    fn window_types_name_their_unit() {
        assert_eq!(window_type("task-clock"), ("strobe.window.task-clock".into(), "nanoseconds"));
        assert_eq!(window_type("page-faults"), ("strobe.window.page-faults".into(), "count"));
    }
}
