//! The OTLP profiles messages strobe sends, written by hand as `prost::Message`
//! implementations over prost's field encoders (as strobe-report's pprof module does:
//! prost-derive would bring a second syn, and twenty messages do not warrant a code
//! generator and `protoc` at build time).
//!
//! The version is the one the OpenTelemetry Collector v0.161.0 speaks: its pdata
//! (v1.67.0, `pprofile` v0.161.0) is generated from opentelemetry-proto v1.11.0, whose
//! profiles package is `opentelemetry.proto.profiles.v1development` as published in the
//! Go module `go.opentelemetry.io/proto/slim/otlp/profiles/v1development` v0.4.0. In that
//! version a `Profile` has one sample type, samples point into a request-wide
//! `ProfilesDictionary` (strings, functions, locations, mappings, stacks, attributes),
//! and build ids are mapping attributes. Field numbers below are that file's; the
//! collector's receiver rejects nothing it does not know, so a mismatch shows up as
//! missing data, which the collector tests catch.
//!
//! Owns: the wire form of the messages (encode and decode). Must never decide what goes
//! in them.

use prost::bytes::{Buf, BufMut};
use prost::encoding::{self as enc, DecodeContext, WireType};
use prost::{DecodeError, Message};

/// One field's encoding, length and decoding, by kind.
macro_rules! otlp_field {
    (encode $kind:ident, $tag:literal, $v:expr, $buf:ident) => {
        otlp_field!(@scalar_or $kind, $tag, $v, $buf)
    };
    (@scalar_or int32, $tag:literal, $v:expr, $buf:ident) => {
        if *$v != 0 { enc::int32::encode($tag, $v, $buf) }
    };
    (@scalar_or uint32, $tag:literal, $v:expr, $buf:ident) => {
        if *$v != 0 { enc::uint32::encode($tag, $v, $buf) }
    };
    (@scalar_or int64, $tag:literal, $v:expr, $buf:ident) => {
        if *$v != 0 { enc::int64::encode($tag, $v, $buf) }
    };
    (@scalar_or uint64, $tag:literal, $v:expr, $buf:ident) => {
        if *$v != 0 { enc::uint64::encode($tag, $v, $buf) }
    };
    (@scalar_or fixed64, $tag:literal, $v:expr, $buf:ident) => {
        if *$v != 0 { enc::fixed64::encode($tag, $v, $buf) }
    };
    (@scalar_or string, $tag:literal, $v:expr, $buf:ident) => {
        if !$v.is_empty() { enc::string::encode($tag, $v, $buf) }
    };
    (@scalar_or bytes, $tag:literal, $v:expr, $buf:ident) => {
        if !$v.is_empty() { enc::bytes::encode($tag, $v, $buf) }
    };
    (@scalar_or packed_i32, $tag:literal, $v:expr, $buf:ident) => {
        enc::int32::encode_packed($tag, $v, $buf)
    };
    (@scalar_or packed_i64, $tag:literal, $v:expr, $buf:ident) => {
        enc::int64::encode_packed($tag, $v, $buf)
    };
    (@scalar_or strings, $tag:literal, $v:expr, $buf:ident) => {
        enc::string::encode_repeated($tag, $v, $buf)
    };
    (@scalar_or messages, $tag:literal, $v:expr, $buf:ident) => {
        enc::message::encode_repeated($tag, $v, $buf)
    };
    (@scalar_or message, $tag:literal, $v:expr, $buf:ident) => {
        enc::message::encode($tag, $v, $buf)
    };
    (@scalar_or opt_message, $tag:literal, $v:expr, $buf:ident) => {
        if let Some(m) = $v { enc::message::encode($tag, m, $buf) }
    };

    (len int32, $tag:literal, $v:expr) => { if *$v != 0 { enc::int32::encoded_len($tag, $v) } else { 0 } };
    (len uint32, $tag:literal, $v:expr) => { if *$v != 0 { enc::uint32::encoded_len($tag, $v) } else { 0 } };
    (len int64, $tag:literal, $v:expr) => { if *$v != 0 { enc::int64::encoded_len($tag, $v) } else { 0 } };
    (len uint64, $tag:literal, $v:expr) => { if *$v != 0 { enc::uint64::encoded_len($tag, $v) } else { 0 } };
    (len fixed64, $tag:literal, $v:expr) => { if *$v != 0 { enc::fixed64::encoded_len($tag, $v) } else { 0 } };
    (len string, $tag:literal, $v:expr) => { if !$v.is_empty() { enc::string::encoded_len($tag, $v) } else { 0 } };
    (len bytes, $tag:literal, $v:expr) => { if !$v.is_empty() { enc::bytes::encoded_len($tag, $v) } else { 0 } };
    (len packed_i32, $tag:literal, $v:expr) => { enc::int32::encoded_len_packed($tag, $v) };
    (len packed_i64, $tag:literal, $v:expr) => { enc::int64::encoded_len_packed($tag, $v) };
    (len strings, $tag:literal, $v:expr) => { enc::string::encoded_len_repeated($tag, $v) };
    (len messages, $tag:literal, $v:expr) => { enc::message::encoded_len_repeated($tag, $v) };
    (len message, $tag:literal, $v:expr) => { enc::message::encoded_len($tag, $v) };
    (len opt_message, $tag:literal, $v:expr) => { $v.as_ref().map_or(0, |m| enc::message::encoded_len($tag, m)) };

    (merge int32, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::int32::merge($w, $v, $b, $c) };
    (merge uint32, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::uint32::merge($w, $v, $b, $c) };
    (merge int64, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::int64::merge($w, $v, $b, $c) };
    (merge uint64, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::uint64::merge($w, $v, $b, $c) };
    (merge fixed64, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::fixed64::merge($w, $v, $b, $c) };
    (merge string, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::string::merge($w, $v, $b, $c) };
    (merge bytes, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::bytes::merge($w, $v, $b, $c) };
    (merge packed_i32, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::int32::merge_repeated($w, $v, $b, $c) };
    (merge packed_i64, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::int64::merge_repeated($w, $v, $b, $c) };
    (merge strings, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::string::merge_repeated($w, $v, $b, $c) };
    (merge messages, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::message::merge_repeated($w, $v, $b, $c) };
    (merge message, $w:ident, $v:expr, $b:ident, $c:ident) => { enc::message::merge($w, $v, $b, $c) };
    (merge opt_message, $w:ident, $v:expr, $b:ident, $c:ident) => {
        enc::message::merge($w, $v.get_or_insert_with(Default::default), $b, $c)
    };
}

/// An OTLP message: its fields, their kinds and tags.
macro_rules! otlp_message {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident: $ty:ty = $kind:ident $tag:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct $name {
            $($(#[$fdoc])* pub $field: $ty,)*
        }

        impl Message for $name {
            fn encode_raw(&self, buf: &mut impl BufMut) {
                $(otlp_field!(encode $kind, $tag, &self.$field, buf);)*
            }

            fn merge_field(
                &mut self,
                tag: u32,
                wire_type: WireType,
                buf: &mut impl Buf,
                ctx: DecodeContext,
            ) -> Result<(), DecodeError> {
                match tag {
                    $($tag => otlp_field!(merge $kind, wire_type, &mut self.$field, buf, ctx),)*
                    _ => enc::skip_field(wire_type, tag, buf, ctx),
                }
            }

            fn encoded_len(&self) -> usize {
                0 $(+ otlp_field!(len $kind, $tag, &self.$field))*
            }

            fn clear(&mut self) {
                *self = Self::default();
            }
        }
    };
}

/// `opentelemetry.proto.common.v1.AnyValue`: the kinds strobe uses (string, int,
/// bool, double); others are skipped when decoding.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum AnyValue {
    /// No value.
    #[default]
    Empty,
    /// `string_value` (1).
    String(String),
    /// `bool_value` (2).
    Bool(bool),
    /// `int_value` (3).
    Int(i64),
    /// `double_value` (4).
    Double(f64),
}

impl Message for AnyValue {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        // A oneof member is encoded even when it holds its type's default value.
        match self {
            AnyValue::Empty => {}
            AnyValue::String(s) => enc::string::encode(1, s, buf),
            AnyValue::Bool(b) => enc::bool::encode(2, b, buf),
            AnyValue::Int(i) => enc::int64::encode(3, i, buf),
            AnyValue::Double(d) => enc::double::encode(4, d, buf),
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => {
                let mut s = String::new();
                enc::string::merge(wire_type, &mut s, buf, ctx)?;
                *self = AnyValue::String(s);
            }
            2 => {
                let mut b = false;
                enc::bool::merge(wire_type, &mut b, buf, ctx)?;
                *self = AnyValue::Bool(b);
            }
            3 => {
                let mut i = 0;
                enc::int64::merge(wire_type, &mut i, buf, ctx)?;
                *self = AnyValue::Int(i);
            }
            4 => {
                let mut d = 0.0;
                enc::double::merge(wire_type, &mut d, buf, ctx)?;
                *self = AnyValue::Double(d);
            }
            _ => enc::skip_field(wire_type, tag, buf, ctx)?,
        }
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        match self {
            AnyValue::Empty => 0,
            AnyValue::String(s) => enc::string::encoded_len(1, s),
            AnyValue::Bool(b) => enc::bool::encoded_len(2, b),
            AnyValue::Int(i) => enc::int64::encoded_len(3, i),
            AnyValue::Double(d) => enc::double::encoded_len(4, d),
        }
    }

    fn clear(&mut self) {
        *self = AnyValue::Empty;
    }
}

otlp_message!(
    /// `common.v1.KeyValue`.
    KeyValue {
        /// The key.
        key: String = string 1,
        /// The value.
        value: Option<AnyValue> = opt_message 2,
    }
);

otlp_message!(
    /// `resource.v1.Resource`.
    Resource {
        /// Attributes (semantic conventions: `service.name`, `host.name`, ...).
        attributes: Vec<KeyValue> = messages 1,
        /// Attributes dropped.
        dropped_attributes_count: u32 = uint32 2,
    }
);

otlp_message!(
    /// `common.v1.InstrumentationScope`.
    InstrumentationScope {
        /// The scope's name (`strobe`).
        name: String = string 1,
        /// Its version.
        version: String = string 2,
    }
);

otlp_message!(
    /// `ValueType`: a sample type or period type (string table indices).
    ValueType {
        /// Type ("cpu", ...).
        type_strindex: i32 = int32 1,
        /// Unit ("nanoseconds", ...).
        unit_strindex: i32 = int32 2,
    }
);

otlp_message!(
    /// `Sample`: a stack, its attributes, and its values (one per observation; strobe
    /// sends one aggregated value per sample).
    Sample {
        /// Index into the stack table.
        stack_index: i32 = int32 1,
        /// Indices into the attribute table.
        attribute_indices: Vec<i32> = packed_i32 2,
        /// Index into the link table (0: none).
        link_index: i32 = int32 3,
        /// Values, of the profile's sample type.
        values: Vec<i64> = packed_i64 4,
    }
);

otlp_message!(
    /// `Mapping`: a mapped binary.
    Mapping {
        /// First address.
        memory_start: u64 = uint64 1,
        /// One past the last.
        memory_limit: u64 = uint64 2,
        /// File offset of `memory_start`.
        file_offset: u64 = uint64 3,
        /// File name (string index).
        filename_strindex: i32 = int32 4,
        /// Attributes (the build id).
        attribute_indices: Vec<i32> = packed_i32 5,
    }
);

otlp_message!(
    /// `Line`: a source line in a function.
    Line {
        /// Index into the function table.
        function_index: i32 = int32 1,
        /// Line number (0: unknown).
        line: i64 = int64 2,
        /// Column (0: unknown).
        column: i64 = int64 3,
    }
);

otlp_message!(
    /// `Location`: an address and the lines it stands for.
    Location {
        /// Index into the mapping table (0: none).
        mapping_index: i32 = int32 1,
        /// Address (0: unknown).
        address: u64 = uint64 2,
        /// Lines, innermost inlined function first.
        lines: Vec<Line> = messages 3,
        /// Attributes (the frame type).
        attribute_indices: Vec<i32> = packed_i32 4,
    }
);

otlp_message!(
    /// `Function`.
    Function {
        /// Name (string index).
        name_strindex: i32 = int32 1,
        /// Symbol name (string index).
        system_name_strindex: i32 = int32 2,
        /// Source file (string index).
        filename_strindex: i32 = int32 3,
        /// First line (0: unknown).
        start_line: i64 = int64 4,
    }
);

otlp_message!(
    /// `Stack`: location indices, leaf first.
    Stack {
        /// Indices into the location table.
        location_indices: Vec<i32> = packed_i32 1,
    }
);

otlp_message!(
    /// `KeyValueAndUnit`: an attribute of the dictionary.
    KeyValueAndUnit {
        /// Key (string index).
        key_strindex: i32 = int32 1,
        /// Value.
        value: Option<AnyValue> = opt_message 2,
        /// Unit (string index, 0: none).
        unit_strindex: i32 = int32 3,
    }
);

otlp_message!(
    /// `ProfilesDictionary`: the tables every profile of a request points into; entry 0
    /// of each is the zero value.
    ProfilesDictionary {
        /// Mappings.
        mapping_table: Vec<Mapping> = messages 1,
        /// Locations.
        location_table: Vec<Location> = messages 2,
        /// Functions.
        function_table: Vec<Function> = messages 3,
        /// Links to spans (strobe has none beyond the zero entry).
        link_table: Vec<Link> = messages 4,
        /// Strings.
        string_table: Vec<String> = strings 5,
        /// Attributes.
        attribute_table: Vec<KeyValueAndUnit> = messages 6,
        /// Stacks.
        stack_table: Vec<Stack> = messages 7,
    }
);

otlp_message!(
    /// `Link`: a sample's span (trace id 16 bytes, span id 8 bytes).
    Link {
        /// Trace id.
        trace_id: Vec<u8> = bytes 1,
        /// Span id.
        span_id: Vec<u8> = bytes 2,
    }
);

otlp_message!(
    /// `Profile`: the samples of one sample type.
    Profile {
        /// The type and unit of every sample value.
        sample_type: ValueType = message 1,
        /// Samples.
        samples: Vec<Sample> = messages 2,
        /// Start of the profiled time range, ns since the Unix epoch.
        time_unix_nano: u64 = fixed64 3,
        /// Its length, ns.
        duration_nano: u64 = uint64 4,
        /// What the sampling period counts.
        period_type: Option<ValueType> = opt_message 5,
        /// The sampling period.
        period: i64 = int64 6,
        /// A 16-byte id (optional).
        profile_id: Vec<u8> = bytes 7,
        /// Attributes dropped.
        dropped_attributes_count: u32 = uint32 8,
        /// The original payload's format ("pprof", ...), with `original_payload`.
        original_payload_format: String = string 9,
        /// The original payload.
        original_payload: Vec<u8> = bytes 10,
        /// Attributes of the whole profile.
        attribute_indices: Vec<i32> = packed_i32 11,
    }
);

otlp_message!(
    /// `ScopeProfiles`: the profiles one instrumentation scope produced.
    ScopeProfiles {
        /// The scope.
        scope: Option<InstrumentationScope> = opt_message 1,
        /// Its profiles.
        profiles: Vec<Profile> = messages 2,
        /// Schema URL.
        schema_url: String = string 3,
    }
);

otlp_message!(
    /// `ResourceProfiles`: the profiles of one resource (for strobe, one process).
    ResourceProfiles {
        /// The resource.
        resource: Option<Resource> = opt_message 1,
        /// Its scopes' profiles.
        scope_profiles: Vec<ScopeProfiles> = messages 2,
        /// Schema URL of the resource.
        schema_url: String = string 3,
    }
);

otlp_message!(
    /// `collector.profiles.v1development.ExportProfilesServiceRequest`: what is POSTed.
    ExportProfilesServiceRequest {
        /// One per resource.
        resource_profiles: Vec<ResourceProfiles> = messages 1,
        /// The tables they share.
        dictionary: Option<ProfilesDictionary> = opt_message 2,
    }
);

otlp_message!(
    /// `ExportProfilesPartialSuccess`: what the server could not accept.
    ExportProfilesPartialSuccess {
        /// Profiles rejected.
        rejected_profiles: i64 = int64 1,
        /// Why.
        error_message: String = string 2,
    }
);

otlp_message!(
    /// `ExportProfilesServiceResponse`.
    ExportProfilesServiceResponse {
        /// Set when part of the request was rejected.
        partial_success: Option<ExportProfilesPartialSuccess> = opt_message 1,
    }
);

otlp_message!(
    /// `google.rpc.Status`: the body of an OTLP/HTTP error response (its `details` are
    /// skipped).
    Status {
        /// gRPC code.
        code: i32 = int32 1,
        /// The server's message.
        message: String = string 2,
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips() {
        let req = ExportProfilesServiceRequest {
            resource_profiles: vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes: vec![
                        KeyValue {
                            key: "service.name".into(),
                            value: Some(AnyValue::String("svc".into())),
                        },
                        KeyValue { key: "process.pid".into(), value: Some(AnyValue::Int(0)) },
                    ],
                    dropped_attributes_count: 0,
                }),
                scope_profiles: vec![ScopeProfiles {
                    scope: Some(InstrumentationScope {
                        name: "strobe".into(),
                        version: "1".into(),
                    }),
                    profiles: vec![Profile {
                        sample_type: ValueType { type_strindex: 1, unit_strindex: 2 },
                        samples: vec![Sample {
                            stack_index: 1,
                            attribute_indices: vec![1],
                            values: vec![-5],
                            ..Default::default()
                        }],
                        time_unix_nano: 1_700_000_000_000_000_000,
                        duration_nano: 5,
                        period_type: Some(ValueType { type_strindex: 1, unit_strindex: 2 }),
                        period: 1_000_000,
                        ..Default::default()
                    }],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
            dictionary: Some(ProfilesDictionary {
                string_table: vec!["".into(), "cpu".into(), "nanoseconds".into()],
                stack_table: vec![Stack::default(), Stack { location_indices: vec![1] }],
                location_table: vec![
                    Location::default(),
                    Location {
                        mapping_index: 1,
                        address: 0x1234,
                        lines: vec![Line { function_index: 1, line: 7, column: 0 }],
                        attribute_indices: vec![],
                    },
                ],
                attribute_table: vec![
                    KeyValueAndUnit::default(),
                    KeyValueAndUnit {
                        key_strindex: 1,
                        value: Some(AnyValue::Bool(false)),
                        unit_strindex: 0,
                    },
                ],
                ..Default::default()
            }),
        };
        let bytes = req.encode_to_vec();
        assert_eq!(bytes.len(), req.encoded_len());
        assert_eq!(ExportProfilesServiceRequest::decode(bytes.as_slice()).unwrap(), req);
    }

    #[test]
    fn time_is_fixed64_and_ints_zero_in_a_oneof_are_kept() {
        let p = Profile { time_unix_nano: 1, ..Default::default() };
        let bytes = p.encode_to_vec();
        // The empty sample type (tag 1, length 0), then tag 3 with wire type 1 (fixed64).
        assert_eq!(bytes, [0x0a, 0x00, 0x19, 1, 0, 0, 0, 0, 0, 0, 0]);
        let v = AnyValue::Int(0).encode_to_vec();
        assert_eq!(v, [0x18, 0x00]);
    }
}
