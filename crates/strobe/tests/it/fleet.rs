//! Integration tests of the OTLP profiles export (`strobe report --export`, `--otlp`)
//! against a real OpenTelemetry Collector v0.161.0 (tests/otelcol, built by
//! ci/otelcol.sh, which ci/setup.sh runs): started on 127.0.0.1 with the OTLP receiver and
//! the file exporter, it writes what it received as JSON, which the tests read back and
//! compare with `strobe report` on the same recording. Forwarding is a chain of two
//! collectors; docs/fleet.md's configurations go through `otelcol validate`.
//!
//! A test skips (saying why) only when the collector binary could not be built.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use strobe_format::{Reader, Record};

use crate::util::{record_to, run, show, strobe, Scratch};

/// The collector binary, built by ci/otelcol.sh when missing; None (with the reason
/// printed) when it cannot be built.
fn otelcol() -> Option<&'static Path> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("STROBE_OTELCOL") {
            return Ok(PathBuf::from(p));
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let bin = target.join("otelcol/otelcol");
        let out = Command::new("bash")
            .arg(root.join("ci/otelcol.sh"))
            .env("CARGO_TARGET_DIR", &target)
            .output();
        match out {
            Ok(o) if o.status.success() && bin.exists() => Ok(bin),
            Ok(o) => Err(format!(
                "ci/otelcol.sh could not build the collector: {}",
                String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("")
            )),
            Err(e) => Err(format!("cannot run ci/otelcol.sh: {e}")),
        }
    });
    match r {
        Ok(p) => Some(p.as_path()),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running collector, killed when dropped.
struct Collector {
    child: Child,
    log: PathBuf,
}

impl Collector {
    /// Starts `otelcol` with `config` (written to DIR/NAME.yaml) and waits until `port`
    /// accepts connections.
    fn start(dir: &Scratch, name: &str, config: &str, port: u16) -> Collector {
        let bin = otelcol().expect("checked by the caller");
        let cfg = dir.path(&format!("{name}.yaml"));
        std::fs::write(&cfg, config).unwrap();
        let log = dir.path(&format!("{name}.log"));
        let child = Command::new(bin)
            .arg("--config")
            .arg(&cfg)
            .arg("--feature-gates=service.profilesSupport")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut c = Collector { child, log };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = c.child.try_wait() {
                panic!("the collector exited ({status}):\n{}", c.log());
            }
            assert!(start.elapsed() < Duration::from_secs(30), "collector not up:\n{}", c.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        c
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A collector config: the OTLP receiver (http on `http`, grpc on `grpc` when given) into
/// `exporters` (YAML under `exporters:`, naming `names`).
fn config(http: Option<u16>, grpc: Option<u16>, exporters: &str, names: &str) -> String {
    let mut protocols = String::new();
    if let Some(p) = http {
        protocols.push_str(&format!("      http:\n        endpoint: 127.0.0.1:{p}\n"));
    }
    if let Some(p) = grpc {
        protocols.push_str(&format!("      grpc:\n        endpoint: 127.0.0.1:{p}\n"));
    }
    format!(
        "receivers:\n  otlp:\n    protocols:\n{protocols}exporters:\n{exporters}\
service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    profiles:\n      receivers: [otlp]\n      exporters: [{names}]\n"
    )
}

fn file_exporter(path: &Path) -> String {
    format!("  file:\n    path: {}\n    flush_interval: 100ms\n", path.display())
}

/// A collector receiving OTLP/HTTP and writing to `out`; returns it and its port.
fn file_collector(dir: &Scratch, name: &str, out: &Path) -> (Collector, u16) {
    let port = free_port();
    let c =
        Collector::start(dir, name, &config(Some(port), None, &file_exporter(out), "file"), port);
    (c, port)
}

/// Waits until the file exporter wrote `lines` requests to `out`, and parses them.
fn received(out: &Path, lines: usize, c: &Collector) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(out).unwrap_or_default();
        let v: Vec<Value> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if v.len() >= lines {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the collector wrote {} of {lines} requests to {}:\n{}",
            v.len(),
            out.display(),
            c.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        v => v.as_i64().unwrap_or(0),
    }
}

/// One sample as read back: its stack's function names (leaf first), thread name, value.
#[derive(Debug, Clone)]
struct Got {
    frames: Vec<String>,
    thread: Option<String>,
    value: i64,
}

/// One profile read back.
#[derive(Debug, Clone)]
struct GotProfile {
    ty: String,
    unit: String,
    period: i64,
    start_ns: u64,
    duration_ns: u64,
    samples: Vec<Got>,
}

/// One resource read back: its attributes (values as text) and profiles.
#[derive(Debug, Clone)]
struct GotResource {
    attrs: BTreeMap<String, String>,
    profiles: Vec<GotProfile>,
}

impl GotResource {
    fn profile(&self, ty: &str) -> &GotProfile {
        self.profiles.iter().find(|p| p.ty == ty).unwrap_or_else(|| {
            panic!(
                "no {ty} profile; have {:?}",
                self.profiles.iter().map(|p| &p.ty).collect::<Vec<_>>()
            )
        })
    }
}

/// Decodes what the collector's file exporter wrote (pdata's JSON: dictionary indices,
/// int64 as strings, resource attributes possibly interned in the string table).
fn decode(requests: &[Value]) -> Vec<GotResource> {
    let mut out = Vec::new();
    for req in requests {
        let d = &req["dictionary"];
        let arr = |k: &str| d[k].as_array().cloned().unwrap_or_default();
        let strings: Vec<String> =
            arr("stringTable").iter().map(|s| s.as_str().unwrap_or("").to_string()).collect();
        let s = |v: &Value| strings.get(int(v) as usize).cloned().unwrap_or_default();
        let functions: Vec<String> =
            arr("functionTable").iter().map(|f| s(&f["nameStrindex"])).collect();
        let locations: Vec<String> = arr("locationTable")
            .iter()
            .map(|l| {
                let f = l["lines"][0]["functionIndex"].clone();
                functions.get(int(&f) as usize).cloned().unwrap_or_default()
            })
            .collect();
        let stacks: Vec<Vec<String>> = arr("stackTable")
            .iter()
            .map(|st| {
                st["locationIndices"]
                    .as_array()
                    .map(|a| a.iter().map(|i| locations[int(i) as usize].clone()).collect())
                    .unwrap_or_default()
            })
            .collect();
        let value_text = |v: &Value| -> String {
            if let Some(x) = v.get("stringValue") {
                x.as_str().unwrap_or("").to_string()
            } else if let Some(x) = v.get("stringValueStrindex") {
                s(x)
            } else if let Some(x) = v.get("intValue") {
                int(x).to_string()
            } else {
                v.to_string()
            }
        };
        let attributes: Vec<(String, String)> = arr("attributeTable")
            .iter()
            .map(|a| (s(&a["keyStrindex"]), value_text(&a["value"])))
            .collect();
        for rp in req["resourceProfiles"].as_array().unwrap() {
            let mut attrs = BTreeMap::new();
            for kv in rp["resource"]["attributes"].as_array().cloned().unwrap_or_default() {
                let key = match kv.get("key") {
                    Some(k) => k.as_str().unwrap().to_string(),
                    None => s(&kv["keyStrindex"]),
                };
                attrs.insert(key, value_text(&kv["value"]));
            }
            let mut profiles = Vec::new();
            for sp in rp["scopeProfiles"].as_array().unwrap() {
                assert_eq!(sp["scope"]["name"], "strobe");
                for p in sp["profiles"].as_array().unwrap() {
                    let samples = p["samples"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .iter()
                        .map(|smp| {
                            let thread = smp["attributeIndices"].as_array().and_then(|a| {
                                a.iter()
                                    .map(|i| &attributes[int(i) as usize])
                                    .find(|(k, _)| k == "thread.name")
                                    .map(|(_, v)| v.clone())
                            });
                            let values = smp["values"].as_array().unwrap();
                            assert_eq!(values.len(), 1, "one aggregated value per sample");
                            Got {
                                frames: stacks[int(&smp["stackIndex"]) as usize].clone(),
                                thread,
                                value: int(&values[0]),
                            }
                        })
                        .collect();
                    profiles.push(GotProfile {
                        ty: s(&p["sampleType"]["typeStrindex"]),
                        unit: s(&p["sampleType"]["unitStrindex"]),
                        period: int(&p["period"]),
                        start_ns: int(&p["timeUnixNano"]) as u64,
                        duration_ns: int(&p["durationNano"]) as u64,
                        samples,
                    });
                }
            }
            out.push(GotResource { attrs, profiles });
        }
    }
    out
}

/// The workload recorded at strobe's defaults, once for every test here.
fn workload() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fleet-shared-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("workload.strobe");
        let out = run(record_to(&file).arg("--").arg(env!("CARGO_BIN_EXE_strobe")).args([
            "workload",
            "--seconds",
            "2",
            "--threads",
            "2",
        ]));
        assert!(out.status.success(), "strobe record failed: {}", show(&out));
        file
    })
}

fn report_json(file: &Path) -> Value {
    let out = run(strobe().arg("report").arg(file).args(["--format", "json"]));
    assert!(out.status.success(), "{}", show(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The recorded process's pid and its threads' names, from the file itself.
fn recorded_process(file: &Path) -> (u32, BTreeSet<String>) {
    let mut pid = 0;
    let mut names = BTreeSet::new();
    for r in Reader::open(file).unwrap() {
        match r.unwrap() {
            Record::Process { info, .. } => pid = info.pid,
            Record::Threads { threads, .. } => names.extend(threads.into_iter().map(|t| t.name)),
            _ => {}
        }
    }
    (pid, names)
}

fn export(file: &Path, url: &str) -> Command {
    let mut cmd = strobe();
    cmd.arg("report").arg(file).arg("--export").arg(url);
    otel_env(&mut cmd);
    cmd
}

/// The test's OpenTelemetry environment: a service name and attributes, no endpoint or
/// headers from the caller's, and no proxy (the collectors are on 127.0.0.1).
fn otel_env(cmd: &mut Command) {
    cmd.env("OTEL_SERVICE_NAME", "fleet-test")
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci,service.version=1.2%2C3");
    for v in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env_remove(v);
    }
}

/// Per function: the sum of `p`'s values over samples whose leaf it is, and over samples
/// with it anywhere on the stack (once per sample), and how many samples had it as leaf.
fn by_function(p: &GotProfile) -> BTreeMap<String, (i64, i64, usize)> {
    let mut m: BTreeMap<String, (i64, i64, usize)> = BTreeMap::new();
    for s in &p.samples {
        let leaf = s.frames.first().cloned().unwrap_or_default();
        let e = m.entry(leaf).or_default();
        e.0 += s.value;
        e.2 += 1;
        let on: BTreeSet<&String> = s.frames.iter().collect();
        for f in on {
            m.entry(f.clone()).or_default().1 += s.value;
        }
    }
    m
}

/// Checks what the collector received against `strobe report`'s JSON for the same file.
fn check_against_report(res: &GotResource, json: &Value) {
    let cpu = res.profile("cpu");
    assert_eq!(cpu.unit, "nanoseconds");
    assert!(cpu.period > 0, "{cpu:?}");
    let cpu_by = by_function(cpu);
    let mut reported = BTreeSet::new();
    // By function name: the report's rows of one name in several modules (the
    // `[not sampled]` rows of each command and thread) are one function in OTLP.
    let mut rows: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for f in json["functions"].as_array().unwrap() {
        let e = rows.entry(f["function"].as_str().unwrap().to_string()).or_default();
        e.0 += f["samples"].as_i64().unwrap();
        e.1 += f["total_samples"].as_i64().unwrap();
    }
    for (name, (samples, total)) in rows {
        let (leaf, on, _) = cpu_by.get(&name).copied().unwrap_or_default();
        // Values are whole sampling cycles: value / period is the sample count, exactly.
        assert_eq!(leaf % cpu.period, 0, "{name}");
        assert_eq!(leaf / cpu.period, samples, "self samples of {name}");
        assert_eq!(on / cpu.period, total, "total samples of {name}");
        if samples > 0 {
            reported.insert(name);
        }
    }
    let leaves: BTreeSet<String> =
        cpu.samples.iter().filter_map(|s| s.frames.first().cloned()).collect();
    assert_eq!(leaves, reported, "the same functions as the report");

    // Window metrics: counts per counter and the window time; summed and divided they
    // give the report's rate, within what rounding each path's sums to an integer (at
    // most 0.5 per sample) and the report's four decimals can move it.
    let events: Vec<String> = json["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect();
    assert_eq!(events[0], "task-clock", "the tests run at the default events");
    let time = by_function(res.profile("strobe.window.task-clock"));
    assert_eq!(res.profile("strobe.window.task-clock").unit, "nanoseconds");
    let windows = by_function(res.profile("strobe.windows"));
    let mut rates_checked = 0;
    for f in json["functions"].as_array().unwrap() {
        let name = f["function"].as_str().unwrap();
        let w = f["windows"].as_i64().unwrap();
        assert_eq!(windows.get(name).map_or(0, |x| x.0), w, "windows of {name}");
        if w == 0 {
            continue;
        }
        let (den, _, k) = time[name];
        for ev in &events[1..] {
            let key = format!("{}_per_ms", ev.replace('-', "_"));
            let Some(want) = f[&key].as_f64() else { continue };
            let p = res.profile(&format!("strobe.window.{ev}"));
            assert_eq!(p.unit, "count");
            let num = by_function(p).get(name).map_or(0, |x| x.0);
            let got = num as f64 / den as f64 * 1e6;
            let slack = 0.5 * k as f64;
            let tol = 1e6 * slack * (1.0 + want.abs() / 1e6) / (den as f64 - slack) + 5e-5 + 1e-9;
            assert!(
                (got - want).abs() <= tol,
                "{name} {key}: OTLP counts give {got} ({num} / {den} ns), the report {want} (tolerance {tol})"
            );
            rates_checked += 1;
        }
    }
    assert!(rates_checked >= 5, "only {rates_checked} rates compared");
}

#[test]
fn export_reaches_the_collector_with_the_reports_functions_counts_and_rates() {
    if otelcol().is_none() {
        return;
    }
    let dir = Scratch::new("fleet-export");
    let out_json = dir.path("profiles.jsonl");
    let (c, port) = file_collector(&dir, "collector", &out_json);
    let file = workload();
    let out = run(&mut export(file, &format!("http://127.0.0.1:{port}")));
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sent 5 profiles of 1 process to http://127.0.0.1"), "{err}");
    let got = decode(&received(&out_json, 1, &c));
    assert_eq!(got.len(), 1, "one resource for one process");
    let res = &got[0];

    let (pid, thread_names) = recorded_process(file);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let a = &res.attrs;
    assert_eq!(a.get("service.name").map(String::as_str), Some("fleet-test"), "{a:?}");
    assert_eq!(a.get("host.name").map(String::as_str), Some(host.trim()), "{a:?}");
    assert_eq!(a.get("process.executable.name").map(String::as_str), Some("strobe"), "{a:?}");
    assert_eq!(a.get("process.pid"), Some(&pid.to_string()), "{a:?}");
    assert_eq!(a.get("deployment.environment").map(String::as_str), Some("ci"), "{a:?}");
    assert_eq!(a.get("service.version").map(String::as_str), Some("1.2,3"), "{a:?}");

    check_against_report(res, &report_json(file));

    // Thread names are the recording's, and the workload's threads are named.
    let cpu = res.profile("cpu");
    let threads: BTreeSet<String> = cpu.samples.iter().filter_map(|s| s.thread.clone()).collect();
    assert!(!threads.is_empty(), "no thread.name on any sample");
    assert!(threads.is_subset(&thread_names), "{threads:?} not in {thread_names:?}");
    // The time range is the recording's: it started before now and lasted about 2 s.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    assert!(cpu.start_ns > 0 && u128::from(cpu.start_ns) < now.as_nanos(), "{cpu:?}");
    assert!(cpu.duration_ns >= 1_000_000_000, "{}", cpu.duration_ns);

    // `--otlp` writes the same request to a file, which the collector takes as it is.
    let pb = dir.path("w.binpb");
    let out = run(strobe()
        .arg("report")
        .arg(file)
        .arg("--otlp")
        .arg(&pb)
        .env("OTEL_SERVICE_NAME", "fleet-test"));
    assert!(out.status.success(), "{}", show(&out));
    let body = std::fs::read(&pb).unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    use std::io::Write;
    write!(
        s,
        "POST /v1development/profiles HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(&body).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let again = decode(&received(&out_json, 2, &c));
    assert_eq!(again[1].profile("cpu").samples.len(), cpu.samples.len());
}

#[test]
fn forwarding_through_two_collectors_keeps_profiles_and_resources() {
    if otelcol().is_none() {
        return;
    }
    let dir = Scratch::new("fleet-chain");
    let out_json = dir.path("gateway.jsonl");
    let grpc = free_port();
    let gateway = Collector::start(
        &dir,
        "gateway",
        &config(None, Some(grpc), &file_exporter(&out_json), "file"),
        grpc,
    );
    let http = free_port();
    let forward =
        format!("  otlp_grpc:\n    endpoint: 127.0.0.1:{grpc}\n    tls:\n      insecure: true\n");
    let _host =
        Collector::start(&dir, "host", &config(Some(http), None, &forward, "otlp_grpc"), http);
    let file = workload();
    let out = run(&mut export(file, &format!("http://127.0.0.1:{http}")));
    assert!(out.status.success(), "{}", show(&out));
    let got = decode(&received(&out_json, 1, &gateway));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].attrs.get("service.name").map(String::as_str), Some("fleet-test"));
    check_against_report(&got[0], &report_json(file));
}

/// The YAML blocks of docs/fleet.md marked `# strobe-fleet-config: NAME`.
fn doc_configs() -> Vec<(String, String)> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/fleet.md"))
            .unwrap();
    let mut out = Vec::new();
    let mut rest = doc.as_str();
    while let Some(i) = rest.find("```yaml\n") {
        rest = &rest[i + 8..];
        let end = rest.find("```").unwrap();
        let block = &rest[..end];
        if let Some(name) =
            block.lines().next().and_then(|l| l.strip_prefix("# strobe-fleet-config: "))
        {
            out.push((name.trim().to_string(), block.to_string()));
        }
        rest = &rest[end + 3..];
    }
    out
}

#[test]
fn every_collector_config_in_the_docs_validates() {
    let Some(bin) = otelcol() else { return };
    let dir = Scratch::new("fleet-docs");
    let configs = doc_configs();
    assert!(configs.len() >= 5, "{configs:?}");
    for (name, text) in configs {
        let f = dir.path(&format!("{name}.yaml"));
        std::fs::write(&f, &text).unwrap();
        let out = run(Command::new(bin)
            .arg("validate")
            .arg("--config")
            .arg(&f)
            .arg("--feature-gates=service.profilesSupport")
            .env("PROFILES_TOKEN", "t"));
        assert!(
            out.status.success(),
            "docs/fleet.md config '{name}' does not validate: {}",
            show(&out)
        );
    }
}

#[test]
fn a_collector_that_is_down_is_one_line_and_a_failure_or_spooled_and_sent_later() {
    if otelcol().is_none() {
        return;
    }
    let dir = Scratch::new("fleet-down");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let file = workload();
    let out = run(&mut export(file, &url));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("5 of 5 profiles could not be sent") && err.contains("refused the connection"),
        "{err}"
    );

    // With a spool: kept, exit 0 with a warning; the next export sends them first.
    let spool = dir.path("spool");
    let out = run(export(file, &url).arg("--spool").arg(&spool));
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warning: 5 of 5 profiles not sent") && err.contains("kept in"), "{err}");
    assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 1);

    let out_json = dir.path("profiles.jsonl");
    let c = Collector::start(
        &dir,
        "late",
        &config(Some(port), None, &file_exporter(&out_json), "file"),
        port,
    );
    let out = run(export(file, &url).arg("--spool").arg(&spool));
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sent 5 profiles") && err.contains("and 5 kept from earlier"), "{err}");
    assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0, "the spool is emptied");
    let got = decode(&received(&out_json, 2, &c));
    assert_eq!(got.len(), 2);
}

#[test]
fn http_errors_show_the_collectors_message() {
    if otelcol().is_none() {
        return;
    }
    let dir = Scratch::new("fleet-4xx");
    let (_c, port) = file_collector(&dir, "c", &dir.path("p.jsonl"));
    // The collector has no traces pipeline: that path is not served.
    let out = run(export(workload(), "")
        .env("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", format!("http://127.0.0.1:{port}/v1/traces")));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("answered HTTP 404: 404 page not found"), "{err}");
}

fn openssl(dir: &Scratch, args: &[&str]) -> bool {
    Command::new("openssl")
        .args(args)
        .current_dir(dir.dir())
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn tls_works_with_the_given_ca_and_says_what_to_do_without_it() {
    if otelcol().is_none() {
        return;
    }
    let dir = Scratch::new("fleet-tls");
    // A private CA and a server certificate for 127.0.0.1, made here.
    let made = openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=strobe test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    ) && openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "srv.key",
            "-out",
            "srv.csr",
        ],
    ) && std::fs::write(dir.path("ext"), "subjectAltName=IP:127.0.0.1\n").is_ok()
        && openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "srv.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "ext",
                "-out",
                "srv.pem",
            ],
        );
    if !made {
        eprintln!("skipped: openssl could not make a test CA");
        return;
    }
    let port = free_port();
    let out_json = dir.path("p.jsonl");
    let cfg = format!(
        "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n        tls:\n          cert_file: {}\n          key_file: {}\n\
exporters:\n{}service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    profiles:\n      receivers: [otlp]\n      exporters: [file]\n",
        dir.path("srv.pem").display(),
        dir.path("srv.key").display(),
        file_exporter(&out_json)
    );
    let c = Collector::start(&dir, "tls", &cfg, port);
    let url = format!("https://127.0.0.1:{port}");
    let file = workload();

    // The system's CAs do not know the private one.
    let out = run(&mut export(file, &url));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--ca-file"), "{err}");
    if Path::new("/etc/ssl/certs/ca-certificates.crt").exists() {
        assert!(err.contains("TLS with https://127.0.0.1"), "{err}");
    }

    let out = run(export(file, &url).arg("--ca-file").arg(dir.path("ca.pem")));
    assert!(out.status.success(), "{}", show(&out));
    let out = run(export(file, &url).env("OTEL_EXPORTER_OTLP_CERTIFICATE", dir.path("ca.pem")));
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(decode(&received(&out_json, 2, &c)).len(), 2);
}

#[test]
fn each_process_of_a_recording_is_its_own_resource_and_they_add_up_to_the_report() {
    if otelcol().is_none() {
        return;
    }
    let dir = Scratch::new("fleet-processes");
    let file = dir.path("e.strobe");
    let prog = strobe_testprogs::path("exec_fork");
    let out = run(record_to(&file).arg("--follow-fork").arg("--").arg(&prog));
    assert_eq!(out.status.code(), Some(7), "{}", show(&out));
    let out_json = dir.path("p.jsonl");
    let (c, port) = file_collector(&dir, "c", &out_json);
    let out = run(&mut export(&file, &format!("http://127.0.0.1:{port}")));
    assert!(out.status.success(), "{}", show(&out));
    let got = decode(&received(&out_json, 1, &c));
    // The program, its forked child, its exec'd image, and /bin/true in its vfork child.
    assert_eq!(got.len(), 4, "{:?}", got.iter().map(|r| &r.attrs).collect::<Vec<_>>());
    let mut exes: Vec<&str> =
        got.iter().map(|r| r.attrs["process.executable.name"].as_str()).collect();
    exes.sort();
    assert_eq!(exes, ["exec_fork", "exec_fork", "exec_fork", "true"]);
    let pids: BTreeSet<&String> = got.iter().map(|r| &r.attrs["process.pid"]).collect();
    assert_eq!(pids.len(), 3, "exec keeps the pid, fork and vfork make new ones: {pids:?}");

    // Per function, the processes' samples add up to the whole recording's report (the
    // `[not sampled]` estimate: see below).
    let mut sum: BTreeMap<String, i64> = BTreeMap::new();
    for r in &got {
        let cpu = r.profile("cpu");
        for (f, (leaf, _, _)) in by_function(cpu) {
            assert_eq!(leaf % cpu.period, 0);
            *sum.entry(f).or_default() += leaf / cpu.period;
        }
    }
    let json = report_json(&file);
    // By function name: the report's `[not sampled]` rows of several commands and threads
    // are one function in OTLP.
    let mut wanted: BTreeMap<&str, i64> = BTreeMap::new();
    for f in json["functions"].as_array().unwrap() {
        *wanted.entry(f["function"].as_str().unwrap()).or_default() +=
            f["samples"].as_i64().unwrap();
    }
    for (name, want) in wanted {
        let have = sum.get(name).copied().unwrap_or(0);
        if name == "[not sampled]" || name == "[strobe agent]" {
            // Rounded per process, and named per process: the whole recording's report lets
            // one process's surplus of samples (sampling noise) cancel another's shortfall
            // within a command, which separate resources cannot, so a resource set names
            // at least what the report names, less the rounding. The agent's set-up is part
            // of what is named (a CI run: 1 sample's worth in the report, under half of one
            // in each of the three processes, so 0 in each resource).
            assert!(have >= want - got.len() as i64, "{name}: {have} vs {want}");
        } else {
            assert_eq!(have, want, "{name}");
        }
    }
}

/// `strobe record --every EVERY --export URL`, in the test's environment.
fn continuous(url: &str, every: &str) -> Command {
    let mut cmd = strobe();
    cmd.args(["record", "--every", every, "--export", url]);
    otel_env(&mut cmd);
    cmd
}

/// The number of intervals with samples that strobe's last line says it sent.
fn requests_sent(stderr: &str) -> usize {
    let line = stderr.lines().find(|l| l.contains(" with samples), ")).unwrap_or_else(|| {
        panic!("no continuous summary in: {stderr}");
    });
    let i = line.find(" with samples").unwrap();
    let open = line[..i].rfind('(').unwrap();
    line[open + 1..i].parse().unwrap()
}

/// Waits until the record file being written at `file` holds at least `n` time samples.
fn wait_for_samples(file: &Path, n: i64) {
    let start = Instant::now();
    loop {
        let have = Reader::open(file).ok().map_or(0, |r| {
            r.map_while(Result::ok)
                .filter_map(|rec| match rec {
                    Record::Samples(b) => Some(
                        b.iter().map_while(Result::ok).filter(|s| s.kind.is_time_sample()).count()
                            as i64,
                    ),
                    _ => None,
                })
                .sum()
        });
        if have >= n {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{} has {have} samples", file.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Time samples in a record file, as its chunks hold them.
fn time_samples_in(file: &Path) -> i64 {
    let mut n = 0;
    for r in Reader::open(file).unwrap() {
        if let Record::Samples(b) = r.unwrap() {
            n += b.iter().filter(|s| s.as_ref().unwrap().kind.is_time_sample()).count() as i64;
        }
    }
    n
}

/// Per function, the CPU samples of every resource's `cpu` profile, summed.
fn cpu_samples_by_function(got: &[GotResource]) -> BTreeMap<String, i64> {
    let mut sum: BTreeMap<String, i64> = BTreeMap::new();
    for r in got {
        let cpu = r.profile("cpu");
        for (f, (leaf, _, _)) in by_function(cpu) {
            assert_eq!(leaf % cpu.period, 0, "{f}");
            *sum.entry(f).or_default() += leaf / cpu.period;
        }
    }
    sum
}

/// Rows of the report that are estimates from the threads' CPU times at the end of the
/// recording, not samples: a continuous profile carries samples only.
fn estimated(name: &str) -> bool {
    name.starts_with("[not sampled]") || name == "[strobe agent]"
}

/// Checks that what the collector received adds up, function by function, to `strobe
/// report` on the recording's local copy, and in all to the time samples the file holds.
fn check_intervals_add_up(got: &[GotResource], file: &Path) {
    let sum = cpu_samples_by_function(got);
    let json = report_json(file);
    let mut checked = 0;
    for f in json["functions"].as_array().unwrap() {
        let name = f["function"].as_str().unwrap();
        let want = f["samples"].as_i64().unwrap();
        let have = sum.get(name).copied().unwrap_or(0);
        if estimated(name) {
            assert!(have <= want, "{name}: {have} sent, {want} in the report");
        } else {
            assert_eq!(
                have, want,
                "{name}: the intervals sent {have} samples, the report has {want}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "only {checked} functions compared");
    let total: i64 = sum.values().sum();
    assert_eq!(total, time_samples_in(file), "every time sample of the file, once");
}

#[test]
fn continuous_intervals_add_up_to_the_report_of_the_same_run() {
    if otelcol().is_none() {
        return;
    }
    let dir = Scratch::new("fleet-every");
    let out_json = dir.path("p.jsonl");
    let (c, port) = file_collector(&dir, "c", &out_json);
    let file = dir.path("run.strobe");
    let out = run(continuous(&format!("http://127.0.0.1:{port}"), "1s")
        .arg("-o")
        .arg(&file)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_strobe"))
        .args(["workload", "--seconds", "4", "--threads", "2"]));
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("could not be sent"), "{err}");
    let n = requests_sent(&err);
    assert!(n >= 4, "a 4 s run cut every second sent {n} intervals: {err}");
    let got = decode(&received(&out_json, n, &c));
    check_intervals_add_up(&got, &file);

    // One request per interval, every interval of one resource a second long and aligned
    // to whole seconds but the first (from the start) and the last (to the end).
    let mut starts: Vec<(u64, u64)> =
        got.iter().map(|r| (r.profile("cpu").start_ns, r.profile("cpu").duration_ns)).collect();
    starts.sort();
    starts.dedup();
    assert_eq!(starts.len(), n, "{starts:?}");
    for w in starts.windows(2) {
        assert_eq!(w[0].0 + w[0].1, w[1].0, "intervals follow each other: {starts:?}");
    }
    for &(s, d) in &starts[1..n - 1] {
        assert_eq!(s % 1_000_000_000, 0, "{starts:?}");
        assert_eq!(d, 1_000_000_000, "{starts:?}");
    }
    // The resources are the process's.
    let (pid, _) = recorded_process(&file);
    assert!(got.iter().all(|r| r.attrs.get("process.pid") == Some(&pid.to_string())));
}

#[test]
fn continuous_mode_sends_the_last_interval_on_sigint_and_sigterm() {
    if otelcol().is_none() {
        return;
    }
    let dir = Scratch::new("fleet-every-signal");
    let out_json = dir.path("p.jsonl");
    let (c, port) = file_collector(&dir, "c", &out_json);
    let url = format!("http://127.0.0.1:{port}");
    let mut seen = 0;
    // A running process recorded with -p until SIGINT, and a launched one whose strobe is
    // sent SIGTERM (passed on to the program, which ends of it): an interval far longer
    // than the run, so the last interval is everything.
    let target = std::process::Command::new(env!("CARGO_BIN_EXE_strobe"))
        .args(["workload", "--seconds", "30", "--threads", "1"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let target = Kill(target);
    for (sig, name) in [(libc::SIGINT, "sigint"), (libc::SIGTERM, "sigterm")] {
        let file = dir.path(&format!("{name}.strobe"));
        let mut cmd = continuous(&url, "1h");
        cmd.arg("-o").arg(&file);
        if sig == libc::SIGINT {
            cmd.arg("-p").arg(target.0.id().to_string());
        } else {
            cmd.arg("--").arg(env!("CARGO_BIN_EXE_strobe")).args(["workload", "--seconds", "30"]);
        }
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        // Signalled once the program runs (a signal during the start-up ends the
        // recording before it begins).
        wait_for_samples(&file, 50);
        std::thread::sleep(Duration::from_secs(1));
        // SAFETY: kill on the child this test started.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if sig == libc::SIGTERM {
            assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{err}");
        } else {
            assert!(out.status.success(), "{err}");
        }
        let n = requests_sent(&err);
        assert!(n >= 1, "{err}");
        seen += n;
        let requests = received(&out_json, seen, &c);
        let got = decode(&requests[seen - n..]);
        let time = time_samples_in(&file);
        assert!(time >= 50, "{name}: {time} samples");
        let sum: i64 = cpu_samples_by_function(&got).values().sum();
        assert_eq!(sum, time, "{name}: every sample sent, the last interval on the signal");
    }
}

#[test]
fn a_collector_stopped_mid_run_costs_only_the_profiles_it_missed() {
    if otelcol().is_none() {
        return;
    }
    let dir = Scratch::new("fleet-every-down");
    let out_json = dir.path("p.jsonl");
    let (c, port) = file_collector(&dir, "c", &out_json);
    let prog = format!(
        "{} workload --seconds 8 --threads 2; echo workload ended; exit 3",
        env!("CARGO_BIN_EXE_strobe")
    );
    let alone = run(Command::new("sh").args(["-c", &prog]));
    assert_eq!(alone.status.code(), Some(3));
    let file = dir.path("run.strobe");
    let spool = dir.path("spool");
    let child = continuous(&format!("http://127.0.0.1:{port}"), "1s")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")
        .arg("--spool")
        .arg(&spool)
        .arg("-o")
        .arg(&file)
        .args(["--", "sh", "-c", &prog])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The collector goes once it has taken an interval.
    received(&out_json, 1, &c);
    drop(c);
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let stopped_ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    let t = Instant::now();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // The program as without strobe.
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(out.stdout, alone.stdout, "{err}");
    // Recorded to the end: samples over the whole run after the collector went.
    let mut last = 0u64;
    let mut first = u64::MAX;
    for r in Reader::open(&file).unwrap() {
        if let Record::Samples(b) = r.unwrap() {
            for s in b.iter() {
                let s = s.unwrap();
                first = first.min(s.time);
                last = last.max(s.time);
            }
        }
    }
    assert!(last - first > 6_000_000_000, "samples over {} ms", (last - first) / 1_000_000);
    assert!(
        last > stopped_ns + 1_000_000_000,
        "no samples a second after the collector stopped ({} ms before the last)",
        (last as i64 - stopped_ns as i64) / 1_000_000
    );
    // Some profiles sent before the collector stopped, the others counted and kept.
    let sent_line = err.lines().find(|l| l.contains(" with samples), ")).unwrap();
    assert!(!sent_line.contains(", 0 profiles sent"), "{err}");
    let lost = err
        .lines()
        .find(|l| l.contains("profiles could not be sent to http://127.0.0.1"))
        .unwrap_or_else(|| panic!("strobe did not say what it could not send: {err}"));
    assert!(lost.contains("kept in the spool"), "{lost}");
    let kept = std::fs::read_dir(&spool).unwrap().count();
    assert!(kept >= 1, "{lost}");
    assert!(t.elapsed() < Duration::from_secs(60), "strobe took {:?} to end", t.elapsed());
}

#[test]
fn a_continuous_local_copy_is_rotated_and_each_file_reads_on_its_own() {
    if otelcol().is_none() {
        return;
    }
    let dir = Scratch::new("fleet-every-rotate");
    let out_json = dir.path("p.jsonl");
    let (_c, port) = file_collector(&dir, "c", &out_json);
    let file = dir.path("run.strobe");
    let out = run(continuous(&format!("http://127.0.0.1:{port}"), "500ms")
        .arg("-o")
        .arg(&file)
        .args(["--rotate", "4K", "--"])
        .arg(env!("CARGO_BIN_EXE_strobe"))
        .args(["workload", "--seconds", "4", "--threads", "2"]));
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(" rotated "), "{err}");
    let mut older = file.as_os_str().to_owned();
    older.push(".1");
    let older = PathBuf::from(older);
    // Two files at most, each a recording of its own that strobe report reads, with the
    // process's stack table and mappings: its functions are named.
    let names: Vec<String> = std::fs::read_dir(dir.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.iter().filter(|n| n.starts_with("run.strobe")).count(), 2, "{names:?}");
    for f in [&file, &older] {
        assert!(std::fs::metadata(f).unwrap().len() < 64 << 10, "{}", f.display());
        let json = report_json(f);
        let named = json["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["function"].as_str().unwrap().starts_with("workload_"))
            .count();
        assert!(named >= 1 || time_samples_in(f) == 0, "{}: {json}", f.display());
    }
}
