//! The bodies of strobe's fuzz targets: every parser that reads input from outside the
//! process (files, command lines, ELF sections), each driven with arbitrary bytes.
//!
//! Each `fuzz_targets/NAME.rs` is one line calling [`NAME`](self) here; `ci/fuzz.sh` builds
//! them with sanitizer coverage and runs each against its seeds in `seeds/NAME/`. A body
//! checks what must hold for *any* input: no panic (checked arithmetic and debug
//! assertions are on), and, where the parser has one, that its printed form parses back
//! to the same value. A crash the fuzzer finds becomes a regression test in the crate
//! that owns the parser, with the fix (see `README.md`).
//!
//! This crate owns only the harness. It must never be a dependency of anything else, nor
//! hold a parser of its own: a body that needs more than the parser's public API is a sign
//! the API lacks an entry point.

/// The record reader (strobe-format): a whole file, streamed record by record, every
/// sample batch decoded.
///
/// The first byte picks how the rest is read. Even: as a file's bytes, exactly. Odd: as
/// chunks to frame ([`frame`]), so that payloads reach their parsers with a valid
/// checksum instead of stopping at the CRC, which random mutations almost never match.
pub fn record_reader(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode & 1 == 0 {
        read_recording(rest);
    } else {
        read_recording(&frame(rest));
    }
}

fn read_recording(bytes: &[u8]) {
    let Ok(reader) = strobe_format::Reader::new(bytes, "fuzz-input") else { return };
    let mut truncated = false;
    for (i, rec) in reader.enumerate() {
        // Each record consumes input: more records than bytes means the reader went round
        // in circles.
        assert!(i <= bytes.len(), "more records than input bytes");
        assert!(!truncated, "a record after the truncation");
        match rec {
            Ok(strobe_format::Record::Samples(batch)) => {
                let mut n = 0u32;
                for s in batch.iter() {
                    if s.is_err() {
                        break;
                    }
                    n += 1;
                }
                assert!(n <= batch.count, "more samples than the batch holds");
            }
            Ok(strobe_format::Record::Truncated { .. }) => truncated = true,
            Ok(_) | Err(_) => {}
        }
    }
}

/// Chunk framing for [`record_reader`]'s odd mode: the preamble, then per chunk a tag
/// byte, a stream byte, a little-endian `u16` payload length (cut to what is left) and
/// the payload, written out with the sync bytes, the full header and a correct CRC-32.
pub fn frame(mut input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + 64);
    out.extend_from_slice(&strobe_format::MAGIC);
    out.extend_from_slice(&strobe_format::MAJOR_VERSION.to_le_bytes());
    while input.len() >= 4 {
        let (tag, stream) = (input[0], input[1]);
        let len = usize::from(u16::from_le_bytes([input[2], input[3]]));
        let payload = &input[4..];
        let payload = &payload[..len.min(payload.len())];
        let mut header = Vec::with_capacity(strobe_format::CHUNK_HEADER_LEN);
        header.extend_from_slice(&strobe_format::CHUNK_SYNC);
        header.push(tag);
        header.push(0);
        header.extend_from_slice(&u32::from(stream).to_le_bytes());
        header.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&header);
        crc.update(payload);
        header.extend_from_slice(&crc.finalize().to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(payload);
        input = &input[4 + payload.len()..];
    }
    out
}

/// The inverse of [`frame`] for a well-formed recording: its chunks as (tag, stream,
/// length, payload), for seeds. `None` if `file` is not a sequence of whole chunks with
/// payloads of at most 64 KiB.
pub fn unframe(file: &[u8]) -> Option<Vec<u8>> {
    let pre = 8;
    let hdr = strobe_format::CHUNK_HEADER_LEN;
    let mut rest = file.get(pre..)?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let h = rest.get(..hdr)?;
        let len = u32::from_le_bytes(h[8..12].try_into().ok()?) as usize;
        let stream = u32::from_le_bytes(h[4..8].try_into().ok()?);
        out.push(h[2]);
        out.push(u8::try_from(stream).ok()?);
        out.extend_from_slice(&u16::try_from(len).ok()?.to_le_bytes());
        out.extend_from_slice(rest.get(hdr..hdr + len)?);
        rest = &rest[hdr + len..];
    }
    Some(out)
}

/// The event-spec parser (strobe-perf `spec::parse`), on both kinds of machine (the first
/// byte says whether a hardware PMU exists), then everything built from a parsed spec: its
/// attrs, warnings, PMU check, and its printed form, which must parse back to the same
/// events and terms (whether the default leader was added is how it was written, not what
/// it is: the printed form names the leader).
pub fn event_spec(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let hardware = flags & 1 != 0;
    let Ok(g) = strobe_perf::spec::parse(text, hardware) else { return };
    let _ = g.warnings();
    let _ = g.check_pmu(flags & 2 != 0);
    let kernel = flags & 4 != 0;
    let _ = g.leader_attr(g.period.unwrap_or(1_000_000), 0x5354_5242, kernel);
    for i in 0..g.events.len() {
        let _ = g.counting_attr(i, kernel);
    }
    let printed = g.to_spec_string();
    match strobe_perf::spec::parse(&printed, hardware) {
        Ok(again) => assert_eq!(
            (&again.events, again.period, again.window, again.jitter),
            (&g.events, g.period, g.window, g.jitter),
            "{text:?} printed as {printed:?}"
        ),
        Err(e) => panic!("{text:?} printed as {printed:?}, which does not parse: {e}"),
    }
}

/// The watch-spec parser (strobe-watch `WatchSpec::parse`): a parsed spec's absolute
/// watchpoint, and its printed form, which must parse back to the same location, length
/// and access.
pub fn watch_spec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(w) = strobe_watch::WatchSpec::parse(text) else { return };
    if let Some(wp) = w.as_absolute() {
        assert!(wp.len.bytes() <= 8);
        let _ = wp.address(0);
    }
    let printed = w.to_string();
    match strobe_watch::WatchSpec::parse(&printed) {
        Ok(again) => assert_eq!(
            (&again.module, &again.location, again.len, again.access),
            (&w.module, &w.location, w.len, w.access),
            "{text:?} printed as {printed:?}"
        ),
        Err(e) => panic!("{text:?} printed as {printed:?}, which does not parse: {e}"),
    }
}

/// The kernel-probe spec parser (strobe-uprobe `ProbeSpec::parse`).
pub fn probe_spec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(p) = strobe_uprobe::ProbeSpec::parse(text) {
        let _ = p.lib();
    }
}

/// The USDT note parser (strobe-target `usdt::parse_notes`): the bytes of a
/// `.note.stapsdt` section, little-endian when the first byte is even, big-endian when odd.
pub fn usdt_notes(data: &[u8]) {
    let Some((&order, rest)) = data.split_first() else { return };
    if let Ok(notes) = strobe_target::usdt::parse_notes(rest, order & 1 == 0) {
        for n in &notes {
            let _ = n.qualified_name();
        }
        assert!(notes.len() <= rest.len() / 12, "a note takes at least 12 bytes");
    }
}

/// What crosses between strobe and the code in the target (strobe-protocol): the first
/// byte picks the decoder, the rest is its input. 0: a watch request, from the hex form
/// the agent reads in its environment; 1: the agent's watch stream, as strobe reads it
/// from the pipe; 2: a probe library's exit report (a file a user's program writes);
/// 3: a probe trace line. Whatever decodes must encode to a form that decodes to the same.
pub fn protocol(data: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    use strobe_protocol::{probe, watch};
    let Some((&which, rest)) = data.split_first() else { return };
    match which % 4 {
        0 => {
            if let Ok(r) = watch::WatchRequest::from_env(std::ffi::OsStr::from_bytes(rest)) {
                assert_eq!(watch::WatchRequest::from_env(&r.to_env()).as_ref(), Ok(&r));
                assert_eq!(watch::WatchRequest::decode(&r.encode()).as_ref(), Ok(&r));
            }
        }
        1 => {
            let mut s = watch::HitStream::new(rest);
            let mut n = 0;
            while let Ok(Some(m)) = s.read() {
                n += 1;
                assert!(n <= rest.len() / 5, "a frame takes at least 5 bytes");
                let mut frame = Vec::new();
                m.encode(&mut frame);
                assert_eq!(watch::Message::decode(&frame[4..]), Ok(m));
            }
        }
        2 => {
            let Ok(text) = std::str::from_utf8(rest) else { return };
            if let Ok(r) = probe::PointReport::decode(text) {
                assert_eq!(probe::PointReport::decode(&r.encode()).as_ref(), Ok(&r));
            }
        }
        _ => {
            let Ok(text) = std::str::from_utf8(rest) else { return };
            if let Ok(t) = probe::TraceRecord::decode(text) {
                let mut line = String::new();
                let l = probe::TraceLine {
                    probe: &t.probe,
                    tid: t.tid,
                    ns: t.ns,
                    kind: t.kind,
                    args: &t.args,
                };
                l.encode(&mut line);
                assert_eq!(
                    probe::TraceRecord::decode(line.trim_end_matches('\n')).as_ref(),
                    Ok(&t)
                );
            }
        }
    }
}

/// The perf.data decoder (strobe-perfdata): a file as Linux perf writes it (or its pipe
/// form, or either with zstd-compressed records, read through their uncompressed image),
/// every record in file order and in the order `perf report` reads them, every sample
/// field a report uses.
pub fn perf_data(data: &[u8]) {
    let Ok(expanded) = strobe_perfdata::decompress(data) else { return };
    if let Some(e) = &expanded {
        assert!(e.len() <= data.len() * strobe_perfdata::MAX_RATIO + data.len());
    }
    let data = expanded.as_deref().unwrap_or(data);
    let Ok(file) = strobe_perfdata::PerfData::parse(data) else { return };
    let _ = (file.attrs().len(), file.info(), file.truncated_at());
    let mut n = 0usize;
    for rec in file.records() {
        n += 1;
        assert!(n <= data.len() / 8 + 1, "a record takes at least 8 bytes");
        let Ok(rec) = rec else { break };
        let _ = (rec.cpumode(), rec.id_fields());
        if let strobe_perfdata::Event::Sample(s) = rec.event {
            let _ = (s.ip(), s.tid(), s.time(), s.period(), s.cpu(), s.identifier());
            if let Some(r) = s.read() {
                let _ = (r.time_enabled(), r.time_running());
                assert!(r.iter().count() <= r.len());
            }
            if let Some(c) = s.callchain() {
                assert_eq!(c.raw().count(), c.len());
                let _ = c.frames().count();
            }
            let _ = (s.regs_user().is_some(), s.stack_user().is_some());
        }
    }
    for rec in file.ordered() {
        if rec.is_err() {
            break;
        }
    }
}

/// strobe-otlp's parsers of outside input: a collector's answer (an
/// `ExportProfilesServiceResponse`, or the `google.rpc.Status` of an error), a request as
/// `--otlp` writes it (decoded, then encoded and decoded again to the same bytes), the
/// `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_RESOURCE_ATTRIBUTES` values, and a
/// `/proc/PID/cgroup` file's container id. The first byte picks which.
pub fn otlp(data: &[u8]) {
    use prost::Message;
    use strobe_otlp::proto::{ExportProfilesServiceRequest, ExportProfilesServiceResponse, Status};
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode % 4 {
        0 => {
            let _ = ExportProfilesServiceResponse::decode(rest);
            let _ = Status::decode(rest);
        }
        1 => {
            if let Ok(r) = ExportProfilesServiceRequest::decode(rest) {
                let bytes = r.encode_to_vec();
                assert_eq!(bytes.len(), r.encoded_len());
                let again = ExportProfilesServiceRequest::decode(bytes.as_slice())
                    .expect("an encoded request decodes");
                // Bytes, not values: a NaN double is not equal to itself.
                assert_eq!(again.encode_to_vec(), bytes);
            }
        }
        2 => {
            let Ok(s) = std::str::from_utf8(rest) else { return };
            if let Ok(h) = strobe_otlp::config::parse_headers(s, "OTEL_EXPORTER_OTLP_HEADERS") {
                assert!(h.iter().all(|(k, _)| !k.is_empty()));
            }
            for (k, _) in strobe_otlp::resource::parse_attributes(s) {
                assert!(!k.is_empty() && !k.contains(','));
            }
        }
        _ => {
            let Ok(s) = std::str::from_utf8(rest) else { return };
            if let Some(id) = strobe_otlp::resource::container_id_in_cgroup(s) {
                assert!(id.len() == 64 && id.bytes().all(|c| c.is_ascii_hexdigit()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed seed recording, without its mode byte.
    fn recording() -> Vec<u8> {
        let seed = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/seeds/record_reader/whole"));
        seed.expect("the committed seed").split_off(1)
    }

    #[test]
    fn framing_the_unframed_chunks_gives_the_recording_back() {
        let file = recording();
        let chunks = unframe(&file).expect("whole chunks");
        assert_eq!(frame(&chunks), file);
        // So the framed seed reaches every payload parser: all of its records read.
        let framed = frame(&chunks);
        let reader = strobe_format::Reader::new(&framed[..], "seed").unwrap();
        let records: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
        assert_eq!(records.len(), 10, "{records:?}");
    }

    #[test]
    fn every_seed_runs_clean() {
        let seeds = concat!(env!("CARGO_MANIFEST_DIR"), "/seeds");
        type Body = fn(&[u8]);
        let targets: [(&str, Body); 7] = [
            ("record_reader", record_reader),
            ("protocol", protocol),
            ("event_spec", event_spec),
            ("watch_spec", watch_spec),
            ("probe_spec", probe_spec),
            ("usdt_notes", usdt_notes),
            ("otlp", otlp),
        ];
        for (name, body) in targets {
            let dir = std::fs::read_dir(format!("{seeds}/{name}")).unwrap();
            let mut n = 0;
            for f in dir {
                body(&std::fs::read(f.unwrap().path()).unwrap());
                n += 1;
            }
            assert!(n >= 3, "{name}: {n} seeds");
        }
    }
}
