//! pprof: the report as a gzipped `profile.proto` (github.com/google/pprof,
//! proto/profile.proto), which `go tool pprof`, Pyroscope, Parca, Polar Signals and
//! Grafana read.
//!
//! One pprof sample per call path, with these values (sample types):
//!
//! - `samples/count`: time samples on the path (the default type, so `go tool pprof -top`
//!   ranks functions as `strobe report` does);
//! - `cpu/nanoseconds`: the same in CPU time, each sample standing for one sampling
//!   cycle (long period + half the jitter + window) when the leader counts time;
//! - `window-EVENT/UNIT` for every recorded counter: the net sum of its window deltas
//!   over the windows that started on the path (baseline subtracted, rounded).
//!
//! A location per function (pprof's function-level view: the path's frames are
//! functions), with the function's most sampled source line; a mapping per module file
//! with its GNU build id, so a server can fetch symbols and sources for it.
//!
//! The messages are written by hand below (a `prost::Message` implementation per message,
//! through prost's field encoders): nine messages do not warrant a code generator and a
//! `protoc` at build time, and prost's derive (prost-derive 0.14) would bring syn 2 beside
//! the workspace's syn 3.
//!
//! Owns: the profile.proto encoding of a report. Must never compute metrics.

use std::io::Write;

use prost::bytes::{Buf, BufMut};
use prost::encoding::{self as enc, DecodeContext, WireType};
use prost::{DecodeError, Message};
use rustc_hash::FxHashMap;

use crate::report::Report;
use crate::ReportError;

/// One message field's encoding.
macro_rules! field {
    (encode int64, $tag:literal, $v:expr, $buf:ident) => {
        if *$v != 0 {
            enc::int64::encode($tag, $v, $buf)
        }
    };
    (encode uint64, $tag:literal, $v:expr, $buf:ident) => {
        if *$v != 0 {
            enc::uint64::encode($tag, $v, $buf)
        }
    };
    (encode bool, $tag:literal, $v:expr, $buf:ident) => {
        if *$v {
            enc::bool::encode($tag, $v, $buf)
        }
    };
    (encode packed_u64, $tag:literal, $v:expr, $buf:ident) => {
        enc::uint64::encode_packed($tag, $v, $buf)
    };
    (encode packed_i64, $tag:literal, $v:expr, $buf:ident) => {
        enc::int64::encode_packed($tag, $v, $buf)
    };
    (encode strings, $tag:literal, $v:expr, $buf:ident) => {
        enc::string::encode_repeated($tag, $v, $buf)
    };
    (encode messages, $tag:literal, $v:expr, $buf:ident) => {
        enc::message::encode_repeated($tag, $v, $buf)
    };
    (encode opt_message, $tag:literal, $v:expr, $buf:ident) => {
        if let Some(m) = $v {
            enc::message::encode($tag, m, $buf)
        }
    };
    (len int64, $tag:literal, $v:expr) => {
        if *$v != 0 {
            enc::int64::encoded_len($tag, $v)
        } else {
            0
        }
    };
    (len uint64, $tag:literal, $v:expr) => {
        if *$v != 0 {
            enc::uint64::encoded_len($tag, $v)
        } else {
            0
        }
    };
    (len bool, $tag:literal, $v:expr) => {
        if *$v {
            enc::bool::encoded_len($tag, $v)
        } else {
            0
        }
    };
    (len packed_u64, $tag:literal, $v:expr) => {
        enc::uint64::encoded_len_packed($tag, $v)
    };
    (len packed_i64, $tag:literal, $v:expr) => {
        enc::int64::encoded_len_packed($tag, $v)
    };
    (len strings, $tag:literal, $v:expr) => {
        enc::string::encoded_len_repeated($tag, $v)
    };
    (len messages, $tag:literal, $v:expr) => {
        enc::message::encoded_len_repeated($tag, $v)
    };
    (len opt_message, $tag:literal, $v:expr) => {
        $v.as_ref().map_or(0, |m| enc::message::encoded_len($tag, m))
    };
    (merge int64, $w:ident, $v:expr, $buf:ident, $ctx:ident) => {
        enc::int64::merge($w, $v, $buf, $ctx)
    };
    (merge uint64, $w:ident, $v:expr, $buf:ident, $ctx:ident) => {
        enc::uint64::merge($w, $v, $buf, $ctx)
    };
    (merge bool, $w:ident, $v:expr, $buf:ident, $ctx:ident) => {
        enc::bool::merge($w, $v, $buf, $ctx)
    };
    (merge packed_u64, $w:ident, $v:expr, $buf:ident, $ctx:ident) => {
        enc::uint64::merge_repeated($w, $v, $buf, $ctx)
    };
    (merge packed_i64, $w:ident, $v:expr, $buf:ident, $ctx:ident) => {
        enc::int64::merge_repeated($w, $v, $buf, $ctx)
    };
    (merge strings, $w:ident, $v:expr, $buf:ident, $ctx:ident) => {
        enc::string::merge_repeated($w, $v, $buf, $ctx)
    };
    (merge messages, $w:ident, $v:expr, $buf:ident, $ctx:ident) => {
        enc::message::merge_repeated($w, $v, $buf, $ctx)
    };
    (merge opt_message, $w:ident, $v:expr, $buf:ident, $ctx:ident) => {
        enc::message::merge($w, $v.get_or_insert_with(Default::default), $buf, $ctx)
    };
}

/// A profile.proto message: its fields, kinds and tags.
macro_rules! message {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident: $ty:ty = $kind:ident $tag:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct $name {
            $($(#[$fdoc])* pub $field: $ty,)*
        }

        impl Message for $name {
            fn encode_raw(&self, buf: &mut impl BufMut) {
                $(field!(encode $kind, $tag, &self.$field, buf);)*
            }

            fn merge_field(
                &mut self,
                tag: u32,
                wire_type: WireType,
                buf: &mut impl Buf,
                ctx: DecodeContext,
            ) -> Result<(), DecodeError> {
                match tag {
                    $($tag => field!(merge $kind, wire_type, &mut self.$field, buf, ctx),)*
                    _ => enc::skip_field(wire_type, tag, buf, ctx),
                }
            }

            fn encoded_len(&self) -> usize {
                0 $(+ field!(len $kind, $tag, &self.$field))*
            }

            fn clear(&mut self) {
                *self = Self::default();
            }
        }
    };
}

message!(
    /// A sample type or the period type: indices into the string table.
    ValueType {
        /// "samples", "cpu", ...
        r#type: i64 = int64 1,
        /// "count", "nanoseconds", ...
        unit: i64 = int64 2,
    }
);

message!(
    /// A label on a sample.
    Label {
        /// Key (string index).
        key: i64 = int64 1,
        /// String value (string index).
        str: i64 = int64 2,
        /// Numeric value.
        num: i64 = int64 3,
        /// Unit of `num` (string index).
        num_unit: i64 = int64 4,
    }
);

message!(
    /// One sample: a stack of locations (leaf first) and one value per sample type.
    Sample {
        /// Location ids, leaf first.
        location_id: Vec<u64> = packed_u64 1,
        /// One value per sample type.
        value: Vec<i64> = packed_i64 2,
        /// Labels.
        label: Vec<Label> = messages 3,
    }
);

message!(
    /// A mapped object.
    Mapping {
        /// Id (from 1).
        id: u64 = uint64 1,
        /// First address.
        memory_start: u64 = uint64 2,
        /// One past the last.
        memory_limit: u64 = uint64 3,
        /// File offset of `memory_start`.
        file_offset: u64 = uint64 4,
        /// File name (string index).
        filename: i64 = int64 5,
        /// Build id (string index, hex).
        build_id: i64 = int64 6,
        /// Whether functions are named.
        has_functions: bool = bool 7,
        /// Whether file names are known.
        has_filenames: bool = bool 8,
        /// Whether line numbers are known.
        has_line_numbers: bool = bool 9,
        /// Whether inlined frames are expanded.
        has_inline_frames: bool = bool 10,
    }
);

message!(
    /// A source line in a function.
    Line {
        /// Function id.
        function_id: u64 = uint64 1,
        /// Line number.
        line: i64 = int64 2,
        /// Column.
        column: i64 = int64 3,
    }
);

message!(
    /// A location: an address and the lines it stands for.
    Location {
        /// Id (from 1).
        id: u64 = uint64 1,
        /// Mapping id.
        mapping_id: u64 = uint64 2,
        /// Address (0: unknown).
        address: u64 = uint64 3,
        /// Lines, innermost inlined first.
        line: Vec<Line> = messages 4,
        /// Whether the location was folded.
        is_folded: bool = bool 5,
    }
);

message!(
    /// A function.
    Function {
        /// Id (from 1).
        id: u64 = uint64 1,
        /// Name (string index).
        name: i64 = int64 2,
        /// Symbol name (string index).
        system_name: i64 = int64 3,
        /// Source file (string index).
        filename: i64 = int64 4,
        /// First line.
        start_line: i64 = int64 5,
    }
);

message!(
    /// The profile.
    Profile {
        /// What each sample value is.
        sample_type: Vec<ValueType> = messages 1,
        /// The samples.
        sample: Vec<Sample> = messages 2,
        /// Mappings.
        mapping: Vec<Mapping> = messages 3,
        /// Locations.
        location: Vec<Location> = messages 4,
        /// Functions.
        function: Vec<Function> = messages 5,
        /// Strings; the first is "".
        string_table: Vec<String> = strings 6,
        /// Regex of frames to drop.
        drop_frames: i64 = int64 7,
        /// Regex of frames to keep.
        keep_frames: i64 = int64 8,
        /// Collection time.
        time_nanos: i64 = int64 9,
        /// Duration.
        duration_nanos: i64 = int64 10,
        /// The period's type.
        period_type: Option<ValueType> = opt_message 11,
        /// The sampling period.
        period: i64 = int64 12,
        /// Free-text comments (string indices).
        comment: Vec<i64> = packed_i64 13,
        /// The sample type shown by default (string index).
        default_sample_type: i64 = int64 14,
    }
);

struct Strings {
    table: Vec<String>,
    index: FxHashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        Strings { table: vec![String::new()], index: FxHashMap::default() }
    }

    fn id(&mut self, s: &str) -> i64 {
        if s.is_empty() {
            return 0;
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// Splits `file:line` into the file and the line.
fn split_source(source: &str) -> (&str, i64) {
    match source.rsplit_once(':') {
        Some((file, line)) => match line.parse() {
            Ok(n) => (file, n),
            Err(_) => (source, 0),
        },
        None => (source, 0),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The mean CPU time one time sample stands for, ns, when the leader counts time.
pub fn sample_ns(report: &Report) -> Option<f64> {
    let i = &report.info;
    (report.leader_is_time() && i.period > 0)
        .then(|| i.period as f64 + i.jitter as f64 / 2.0 + i.window as f64)
}

/// Builds the profile of `report`.
pub fn profile(report: &Report) -> Profile {
    let mut s = Strings::new();
    let mut p = Profile::default();
    let cycle = sample_ns(report);
    p.sample_type.push(ValueType { r#type: s.id("samples"), unit: s.id("count") });
    if cycle.is_some() {
        p.sample_type.push(ValueType { r#type: s.id("cpu"), unit: s.id("nanoseconds") });
    }
    for (k, e) in report.info.events.iter().enumerate() {
        let unit = if k == 0 && report.leader_is_time() { "nanoseconds" } else { "count" };
        p.sample_type.push(ValueType { r#type: s.id(&format!("window-{e}")), unit: s.id(unit) });
    }
    p.default_sample_type = s.id("samples");
    if let Some(c) = cycle {
        p.period_type = Some(ValueType { r#type: s.id("cpu"), unit: s.id("nanoseconds") });
        p.period = c.round() as i64;
    }
    let comment = format!(
        "strobe report: {}; events {}; {} samples, {} lost",
        if report.info.command.is_empty() { "-".into() } else { report.info.command.join(" ") },
        report.info.events.join(","),
        report.samples,
        report.lost_samples
    );
    p.comment.push(s.id(&comment));

    // Mappings by module path: executables first (pprof's main binary is the first
    // mapping, whose file and build id its tools print), then libraries, then the kernel,
    // the vDSO and other pseudo modules.
    let mut mapping_of: FxHashMap<&str, u64> = FxHashMap::default();
    let mut order: Vec<&crate::report::FunctionStats> = report.functions.iter().collect();
    order.sort_by_key(|f| {
        let m = f.module_path.as_str();
        (!m.starts_with('/'), m.contains(".so"))
    });
    for f in order {
        if mapping_of.contains_key(f.module_path.as_str()) {
            continue;
        }
        let id = p.mapping.len() as u64 + 1;
        let build_id = if f.module_path.starts_with('/') {
            let file = crate::symbolize::under_symfs(report.symfs.as_deref(), &f.module_path);
            strobe_target::debuginfo::build_id(&file)
                .ok()
                .flatten()
                .map(|b| hex(&b))
                .unwrap_or_default()
        } else {
            String::new()
        };
        let has_lines =
            report.functions.iter().any(|g| g.module_path == f.module_path && g.source.is_some());
        p.mapping.push(Mapping {
            id,
            filename: s.id(&f.module_path),
            build_id: s.id(&build_id),
            has_functions: true,
            has_filenames: has_lines,
            has_line_numbers: has_lines,
            ..Mapping::default()
        });
        mapping_of.insert(&f.module_path, id);
    }
    // A function and a location per report function (ids: index + 1).
    for (i, f) in report.functions.iter().enumerate() {
        let id = i as u64 + 1;
        let (file, line) = f.source.as_deref().map_or(("", 0), split_source);
        p.function.push(Function {
            id,
            name: s.id(&f.function),
            system_name: s.id(&f.function),
            filename: s.id(file),
            start_line: 0,
        });
        p.location.push(Location {
            id,
            mapping_id: mapping_of.get(f.module_path.as_str()).copied().unwrap_or(0),
            address: 0,
            line: vec![Line { function_id: id, line, column: 0 }],
            is_folded: false,
        });
    }
    for path in &report.paths {
        if path.frames.is_empty() {
            continue;
        }
        let mut value = vec![path.samples as i64];
        if let Some(c) = cycle {
            value.push((path.samples as f64 * c).round() as i64);
        }
        for k in 0..report.info.events.len() {
            value.push(path.sums.sums.get(k).copied().unwrap_or(0.0).round() as i64);
        }
        p.sample.push(Sample {
            location_id: path.frames.iter().rev().map(|&f| f as u64 + 1).collect(),
            value,
            label: Vec::new(),
        });
    }
    p.string_table = s.table;
    p
}

/// Writes `report` as a gzipped profile.proto to `out`.
pub fn write<W: Write>(report: &Report, out: W) -> Result<(), ReportError> {
    let bytes = profile(report).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&bytes).map_err(|e| ReportError::write("the pprof profile", e))?;
    gz.finish().map_err(|e| ReportError::write("the pprof profile", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let p = Profile {
            sample_type: vec![ValueType { r#type: 1, unit: 2 }],
            sample: vec![Sample { location_id: vec![2, 1], value: vec![5, -3], label: vec![] }],
            mapping: vec![Mapping {
                id: 1,
                filename: 3,
                has_functions: true,
                ..Default::default()
            }],
            location: vec![Location {
                id: 1,
                mapping_id: 1,
                line: vec![Line { function_id: 1, line: 42, column: 0 }],
                ..Default::default()
            }],
            function: vec![Function { id: 1, name: 4, ..Default::default() }],
            string_table: vec![
                "".into(),
                "samples".into(),
                "count".into(),
                "/bin/x".into(),
                "main".into(),
            ],
            period_type: Some(ValueType { r#type: 1, unit: 2 }),
            period: 1_000_000,
            comment: vec![4],
            default_sample_type: 1,
            ..Default::default()
        };
        let bytes = p.encode_to_vec();
        assert_eq!(bytes.len(), p.encoded_len());
        assert_eq!(Profile::decode(bytes.as_slice()).unwrap(), p);
    }

    #[test]
    fn sources_split_at_the_last_colon() {
        assert_eq!(split_source("/src/a.c:12"), ("/src/a.c", 12));
        assert_eq!(split_source("C:/x.c"), ("C:/x.c", 0));
        assert_eq!(split_source("noline"), ("noline", 0));
    }
}
