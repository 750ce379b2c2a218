//! Resource attributes: what each process's profiles say about where they come from.
//!
//! Per process: `service.name`, `host.name`, `process.executable.name`,
//! `process.executable.path`, `process.pid`, `process.parent_pid`, and `container.id` when
//! the process's cgroup names a container. `OTEL_SERVICE_NAME` sets the service name
//! (else `service.name` from `OTEL_RESOURCE_ATTRIBUTES`, else the SDK default
//! `unknown_service:<executable name>`), and `OTEL_RESOURCE_ATTRIBUTES`
//! (`key=value,key=value`, values percent-encoded) adds attributes or replaces detected
//! ones.
//!
//! Owns: the attribute list and the cgroup parsing. Must never read the network or
//! decide which processes are profiled.

use std::path::Path;

use crate::proto::{AnyValue, KeyValue};

/// Resource settings from the environment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceConfig {
    /// `OTEL_SERVICE_NAME`.
    pub service_name: Option<String>,
    /// `OTEL_RESOURCE_ATTRIBUTES`, in order.
    pub attributes: Vec<(String, String)>,
    /// The host name to report (the machine's, by default).
    pub host_name: Option<String>,
}

impl ResourceConfig {
    /// Reads `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` through `var`, and this
    /// machine's host name.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> ResourceConfig {
        ResourceConfig {
            service_name: var("OTEL_SERVICE_NAME").filter(|s| !s.trim().is_empty()),
            attributes: var("OTEL_RESOURCE_ATTRIBUTES")
                .map(|s| parse_attributes(&s))
                .unwrap_or_default(),
            host_name: host_name(),
        }
    }
}

/// One profiled process, as its resource describes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessFacts {
    /// OS pid.
    pub pid: u32,
    /// Parent pid (0: unknown).
    pub ppid: u32,
    /// The executable's path.
    pub exe: String,
    /// The container id, when its cgroup shows one.
    pub container_id: Option<String>,
}

/// Parses `OTEL_RESOURCE_ATTRIBUTES`: comma-separated `key=value` pairs, values
/// percent-decoded; malformed pairs are skipped (the SDKs' rule).
pub fn parse_attributes(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_string(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        // Bytes, not string slices: a '%' may stand before a multi-byte character.
        if let (b'%', Some(h), Some(l)) =
            (c, b.get(i + 1).and_then(|&x| hex(x)), b.get(i + 2).and_then(|&x| hex(x)))
        {
            out.push(h << 4 | l);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This machine's host name (the kernel's `hostname`).
pub fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The container id in the text of a `/proc/PID/cgroup` file: the 64-hex-digit id that
/// Docker, containerd, CRI-O and Podman put in a cgroup path component
/// (`docker-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`,
/// `libpod-<id>.scope`, `/docker/<id>`, `/kubepods/.../<id>`).
pub fn container_id_in_cgroup(text: &str) -> Option<String> {
    for line in text.lines() {
        // hierarchy-id:controllers:path
        let path = line.splitn(3, ':').nth(2)?;
        for part in path.rsplit('/') {
            let stem = part.strip_suffix(".scope").unwrap_or(part);
            let id = stem.rsplit(['-', ':']).next().unwrap_or(stem);
            if id.len() == 64 && id.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Some(id.to_ascii_lowercase());
            }
        }
    }
    None
}

/// The container id of live process `pid`, if it is the process that started at or
/// before `started_by_mono_ns` (`CLOCK_MONOTONIC`): a later process reusing the pid is
/// never taken for it.
pub fn live_container_id(pid: u32, started_by_mono_ns: u64) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22 (starttime, clock ticks since boot) counts after the ')' of the name.
    let after = stat.rsplit_once(')')?.1;
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let start_ns = ticks.checked_mul(1_000_000_000 / USER_HZ)?;
    if start_ns > started_by_mono_ns {
        return None;
    }
    container_id_in_cgroup(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?)
}

/// The unit of `/proc/PID/stat`'s times (`sysconf(_SC_CLK_TCK)`): USER_HZ, 100 on every
/// Linux ABI.
const USER_HZ: u64 = 100;

fn kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue { key: key.to_string(), value: Some(value) }
}

/// The resource attributes of process `p` under `cfg`.
pub fn attributes(cfg: &ResourceConfig, p: &ProcessFacts) -> Vec<KeyValue> {
    let exe_name =
        Path::new(&p.exe).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let service = cfg
        .service_name
        .clone()
        .or_else(|| {
            cfg.attributes.iter().find(|(k, _)| k == "service.name").map(|(_, v)| v.clone())
        })
        .unwrap_or_else(|| format!("unknown_service:{exe_name}"));
    let mut out = vec![kv("service.name", AnyValue::String(service))];
    if let Some(h) = &cfg.host_name {
        out.push(kv("host.name", AnyValue::String(h.clone())));
    }
    if !exe_name.is_empty() {
        out.push(kv("process.executable.name", AnyValue::String(exe_name)));
        out.push(kv("process.executable.path", AnyValue::String(p.exe.clone())));
    }
    out.push(kv("process.pid", AnyValue::Int(i64::from(p.pid))));
    if p.ppid != 0 {
        out.push(kv("process.parent_pid", AnyValue::Int(i64::from(p.ppid))));
    }
    if let Some(c) = &p.container_id {
        out.push(kv("container.id", AnyValue::String(c.clone())));
    }
    for (k, v) in &cfg.attributes {
        if k == "service.name" {
            continue;
        }
        let value = AnyValue::String(v.clone());
        match out.iter_mut().find(|a| &a.key == k) {
            Some(a) => a.value = Some(value),
            None => out.push(kv(k, value)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
        attrs.iter().find(|a| a.key == key).and_then(|a| a.value.as_ref())
    }

    #[test]
    fn resource_attributes_parse_and_decode() {
        assert_eq!(
            parse_attributes("deployment.environment=prod, team=a%2Cb,bad,=x,k=v%3Dw"),
            [
                ("deployment.environment".to_string(), "prod".to_string()),
                ("team".into(), "a,b".into()),
                ("k".into(), "v=w".into())
            ]
        );
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%41%2c"), "A,");
        // Found by the otlp fuzz target: a '%' before a two-byte character sliced the
        // string inside the character.
        assert_eq!(percent_decode("s%a\u{59a}21"), "s%a\u{59a}21");
        assert_eq!(
            parse_attributes("An=Bics%a\u{59a}21d9"),
            [("An".to_string(), "Bics%a\u{59a}21d9".to_string())]
        );
    }

    #[test]
    fn service_name_precedence() {
        let p = ProcessFacts { pid: 7, ppid: 1, exe: "/usr/bin/db".into(), container_id: None };
        let mut cfg = ResourceConfig::default();
        assert_eq!(
            get(&attributes(&cfg, &p), "service.name"),
            Some(&AnyValue::String("unknown_service:db".into()))
        );
        cfg.attributes =
            vec![("service.name".into(), "from-attrs".into()), ("host.name".into(), "h2".into())];
        cfg.host_name = Some("h1".into());
        let a = attributes(&cfg, &p);
        assert_eq!(get(&a, "service.name"), Some(&AnyValue::String("from-attrs".into())));
        assert_eq!(get(&a, "host.name"), Some(&AnyValue::String("h2".into())));
        assert_eq!(get(&a, "process.pid"), Some(&AnyValue::Int(7)));
        cfg.service_name = Some("from-env".into());
        assert_eq!(
            get(&attributes(&cfg, &p), "service.name"),
            Some(&AnyValue::String("from-env".into()))
        );
    }

    #[test]
    fn container_ids_from_cgroup_paths() {
        let id = "3f4ae1b0c2d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3";
        for text in [
            format!("0::/system.slice/docker-{id}.scope"),
            format!("0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-{id}.scope"),
            format!("12:cpu,cpuacct:/docker/{id}\n0::/"),
            format!("0::/kubepods/besteffort/pod1234/{id}"),
            format!("0::/machine.slice/libpod-{id}.scope/container"),
            format!("0::/crio-{id}.scope"),
        ] {
            assert_eq!(container_id_in_cgroup(&text).as_deref(), Some(id), "{text}");
        }
        assert_eq!(container_id_in_cgroup("0::/user.slice/user-0.slice/session-3.scope"), None);
        assert_eq!(container_id_in_cgroup("garbage"), None);
    }

    #[test]
    fn a_live_process_is_itself_and_not_a_later_one() {
        let pid = std::process::id();
        // This process started before the end of time, so it is asked about: the answer
        // is what its own cgroup file shows.
        let cg = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        assert_eq!(live_container_id(pid, u64::MAX), container_id_in_cgroup(&cg));
        // A process that started after time 0 is never taken for one that started by it.
        assert_eq!(live_container_id(pid, 0), None);
    }
}
