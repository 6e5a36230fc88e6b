//! The metrics endpoint scraped by a real Prometheus (Debian's `prometheus`), with the alert
//! rules of `deploy/components/monitoring` loaded: every series named in docs/csi.md is there
//! with the value the driver's state implies, every rule evaluates, and the alerts whose
//! condition the test brings about (a VG over 85% allocated, a thin pool over 85% full)
//! select exactly the series they should.
//!
//! Without `prometheus` on the PATH the Prometheus part skips visibly (CI=true: fails); the
//! scrape itself is checked either way.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use common::*;
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use csi_shim::metrics::http::{serve, Endpoint, CONTENT_TYPE};
use lvmeta::dev::BlockDevice;
use lvmeta::session::Session;

/// `GET path` from `addr` (HTTP/1.0: never chunked): status line, headers and body.
fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(s, "GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out
}

/// The body of an HTTP response.
fn body(response: &str) -> &str {
    response.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// The samples of `text` (OpenMetrics): series (name and labels as printed) to value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// A query string value, percent-encoded.
fn encoded(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A free TCP port on the loopback.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Prometheus's answer to an API call, as JSON, once its `data.result` (or `data.groups`)
/// is not empty, within 60 s.
fn prometheus(addr: std::net::SocketAddr, path: &str, key: &str) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = std::net::TcpStream::connect(addr)
            .ok()
            .map(|_| get(addr, path));
        if let Some(r) = r {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(body(&r)) {
                let found = &v["data"][key];
                if found.as_array().is_some_and(|a| !a.is_empty()) {
                    return v;
                }
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "prometheus {path}: nothing in data.{key} after 60 s"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_scraped_by_prometheus_and_the_alerts_fire() {
    let mut d = driver_thin(Duration::from_secs(10)).await;
    // A thin volume staged on the node (its pool active there), and a linear volume that
    // brings the VG over 85% allocated.
    let fs = cap(Access::SingleNodeWriter, Some("ext4"));
    d.controller
        .create_volume(create("t1", "thin", 8 * MIB, rwo()))
        .await
        .expect("thin volume");
    d.node
        .node_stage_volume(stage(&d, "vg/t1", "st/t1", fs))
        .await
        .expect("stage");
    let free = d
        .controller
        .get_capacity(GetCapacityRequest::default())
        .await
        .expect("capacity")
        .into_inner()
        .available_capacity;
    d.controller
        .create_volume(create("big", "linear", free * 9 / 10, rwo()))
        .await
        .expect("linear volume");
    let missing = d
        .controller
        .controller_get_volume(ControllerGetVolumeRequest {
            volume_id: "vg/nope".into(),
        })
        .await;
    assert_eq!(
        missing.expect_err("no such volume").code(),
        tonic::Code::NotFound
    );
    // The simulated kernel says the pool is 92.8% full, its metadata 87.9%.
    let vg = Session::new(vec![Box::new(d.lun.clone()) as Box<dyn BlockDevice>])
        .vg("vg")
        .expect("vg");
    let uuid = lvmeta::activate::place(&vg, "t1-pool", &[Some("lun".into())])
        .expect("place")
        .dm_uuid;
    d.activation
        .pool(&uuid, |k| {
            k.status = Some(format!(
                "{} 900/1024 950/1024 - rw discard_passdown queue_if_no_space - 1024",
                k.transaction_id
            ))
        })
        .expect("the pool is active");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let endpoint = Endpoint::new(d.backend.clone(), true, Some(d.node_service.clone()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, endpoint, async {
        let _ = stopped.await;
    }));

    let response = tokio::task::spawn_blocking(move || get(addr, "/metrics"))
        .await
        .expect("scrape");
    assert!(response.starts_with("HTTP/1.0 200 "), "{response}");
    assert!(response.contains(CONTENT_TYPE), "content type");
    let text = body(&response);
    assert!(
        text.trim_end().ends_with("# EOF"),
        "OpenMetrics ends with # EOF"
    );
    let m = samples(text);
    let extent = 4 << 20;
    let size = vg.extent_count() as f64 * f64::from(extent);
    let view = d.backend.session().view("vg").expect("view");
    let expect = [
        ("topolvm_volumegroup_size_bytes{device_class=\"vg\"}", size),
        (
            "topolvm_volumegroup_available_bytes{device_class=\"vg\"}",
            view.free_count() as f64 * f64::from(extent),
        ),
        ("lvmeta_volumes{vg=\"vg\",mode=\"linear\"}", 1.0),
        ("lvmeta_volumes{vg=\"vg\",mode=\"thin\"}", 1.0),
        ("lvmeta_snapshots{vg=\"vg\"}", 0.0),
        ("lvmeta_wipe_backlog_volumes{vg=\"vg\"}", 0.0),
        (
            "lvmeta_metadata_text_bytes{vg=\"vg\"}",
            view.metadata().used as f64,
        ),
        (
            "lvmeta_metadata_area_text_limit_bytes{vg=\"vg\",device=\"lun\"}",
            view.metadata().max as f64,
        ),
        (
            "topolvm_thinpool_data_percent{device_class=\"vg\",thinpool=\"t1-pool\",node=\"node-1\"}",
            950.0 * 100.0 / 1024.0,
        ),
        (
            "topolvm_thinpool_metadata_percent{device_class=\"vg\",thinpool=\"t1-pool\",node=\"node-1\"}",
            900.0 * 100.0 / 1024.0,
        ),
        (
            "lvmeta_csi_rpc_duration_seconds_count{method=\"/csi.v1.Controller/CreateVolume\",code=\"OK\"}",
            2.0,
        ),
        (
            "lvmeta_csi_rpc_duration_seconds_count{method=\"/csi.v1.Controller/ControllerGetVolume\",code=\"NotFound\"}",
            1.0,
        ),
    ];
    drop(view);
    for (series, want) in expect {
        let got = m.get(series).copied();
        assert!(
            got.is_some_and(|g| (g - want).abs() < 1e-6),
            "{series}: {got:?}, want {want}\n{text}"
        );
    }
    assert!(
        m.keys()
            .any(|k| k.starts_with("lvmeta_metadata_area_size_bytes{")),
        "area size"
    );

    if let Some(prom) = which_prometheus() {
        check_with_prometheus(&prom, addr).await;
    }
    let _ = stop.send(());
    server.await.expect("metrics server ends");
    d.stop.take().map(|s| s.send(()));
}

/// The `prometheus` binary, or a visible skip (CI=true: a failure).
fn which_prometheus() -> Option<String> {
    let ok = std::process::Command::new("prometheus")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip_or_fail("metrics: no prometheus on the PATH (Debian's prometheus package)");
    }
    ok.then(|| "prometheus".to_owned())
}

/// Prometheus scrapes `target` every second with the monitoring component's rules loaded.
async fn check_with_prometheus(prom: &str, target: std::net::SocketAddr) {
    let dir = tempfile::tempdir().expect("tempdir");
    let rule_file: serde_json::Value = {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/components/monitoring/prometheusrule.yaml"
        );
        let yaml = std::fs::read_to_string(path).expect("prometheusrule.yaml");
        let obj: serde_json::Value = serde_yaml_ng::from_str(&yaml).expect("rule YAML");
        obj["spec"].clone()
    };
    let rules = dir.path().join("rules.json");
    std::fs::write(&rules, rule_file.to_string()).expect("rules");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [{rules:?}]\n\
             scrape_configs:\n  - job_name: lvmeta\n    static_configs: [{{targets: [\"{target}\"]}}]\n",
            rules = rules.display().to_string()
        ),
    )
    .expect("config");
    let web: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let _prometheus = KillOnDrop(
        std::process::Command::new(prom)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );
    let alerts: Vec<(String, String)> = rule_file["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| {
            (
                r["alert"].as_str().expect("alert").to_owned(),
                r["expr"].as_str().expect("expr").to_owned(),
            )
        })
        .collect();
    tokio::task::spawn_blocking(move || {
        // Scraped: the VG's size as Prometheus stored it.
        let v = prometheus(
            web,
            "/api/v1/query?query=topolvm_volumegroup_size_bytes",
            "result",
        );
        assert_eq!(v["data"]["result"][0]["metric"]["device_class"], "vg");
        // Every rule loaded and evaluated without error.
        let v = prometheus(web, "/api/v1/rules", "groups");
        let rules = v["data"]["groups"][0]["rules"].as_array().expect("rules");
        assert_eq!(rules.len(), alerts.len());
        for r in rules {
            assert_eq!(r["health"], "ok", "rule {}: {}", r["name"], r["lastError"]);
        }
        // What each alert's condition selects now.
        let firing = |expr: &str| {
            let path = format!("/api/v1/query?query={}", encoded(expr));
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            loop {
                let v: serde_json::Value =
                    serde_json::from_str(body(&get(web, &path))).expect("query JSON");
                assert_eq!(v["status"], "success", "{expr}: {v}");
                let n = v["data"]["result"].as_array().map_or(0, Vec::len);
                // Series appear with the first scrapes; wait until the rates can be taken.
                if n > 0 || std::time::Instant::now() > deadline {
                    return n;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        };
        let want_firing = [
            "LvmetaVolumeGroupUsageHigh",
            "LvmetaVolumeGroupUsageCritical",
            "LvmetaThinPoolDataUsageHigh",
            "LvmetaThinPoolDataUsageCritical",
            "LvmetaThinPoolMetadataUsageHigh",
            "LvmetaThinPoolMetadataUsageCritical",
        ];
        for (alert, expr) in &alerts {
            if want_firing.contains(&alert.as_str()) {
                assert_eq!(firing(expr), 1, "{alert} selects the VG or the pool");
            }
        }
        // The others select nothing (a quick check: no waiting for series to appear).
        for (alert, expr) in &alerts {
            if !want_firing.contains(&alert.as_str()) {
                let path = format!("/api/v1/query?query={}", encoded(expr));
                let v: serde_json::Value =
                    serde_json::from_str(body(&get(web, &path))).expect("query JSON");
                assert_eq!(v["data"]["result"], serde_json::json!([]), "{alert}");
            }
        }
    })
    .await
    .expect("prometheus checks");
}

/// A child process killed (and reaped) when dropped, the test failing or not.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A shared VG (leases in memory): the lockspace gauge follows lockstop and lockstart, and
/// VG lease requests are timed by outcome.
#[tokio::test]
async fn lease_requests_and_the_lockspace_are_measured() {
    use std::sync::Arc;
    let metrics = Arc::new(csi_shim::metrics::Metrics::default());
    let (session, lun) = shared_vg(|h| h.with_observer(metrics.clone()));
    let backend =
        csi_shim::driver::Driver::new(session, vec!["vg".into()]).with_metrics(metrics.clone());
    let mut d = common::serve(backend, lun).await;
    let scrape_as = |d: &Harness, vgs: bool| {
        let scope = csi_shim::metrics::Scope { vgs, node: None };
        samples(&d.backend.metrics().scrape(&d.backend, &scope))
    };
    let scrape = |d: &Harness| scrape_as(d, true);
    d.controller
        .create_volume(create("a", "linear", 8 * MIB, rwo()))
        .await
        .expect("create");
    let m = scrape(&d);
    assert_eq!(m.get("lvmeta_lockspace_joined{vg=\"vg\"}"), Some(&1.0));
    let acquired = "lvmeta_vg_lease_request_duration_seconds_count{vg=\"vg\",outcome=\"acquired\"}";
    assert!(m.get(acquired).is_some_and(|&n| n >= 1.0), "{m:?}");
    // Out of the lockspace: a change is refused, its lease request counted as failed.
    d.backend.session().lockstop("vg").expect("lockstop");
    let refused = d
        .controller
        .create_volume(create("b", "linear", 8 * MIB, rwo()))
        .await;
    assert!(refused.is_err());
    let m = scrape(&d);
    assert_eq!(m.get("lvmeta_lockspace_joined{vg=\"vg\"}"), Some(&0.0));
    // A node plugin reports its own lockspace, not the VG's gauges.
    let node = scrape_as(&d, false);
    assert_eq!(node.get("lvmeta_lockspace_joined{vg=\"vg\"}"), Some(&0.0));
    assert!(
        !node.keys().any(|k| k.starts_with("topolvm_volumegroup")),
        "{node:?}"
    );
    let failed = "lvmeta_vg_lease_request_duration_seconds_count{vg=\"vg\",outcome=\"failed\"}";
    assert!(m.get(failed).is_some_and(|&n| n >= 1.0), "{m:?}");
    d.stop.take().map(|s| s.send(()));
}

/// Idle and half-sent connections neither pile up nor keep a scrape out: after
/// `HEADER_TIMEOUT` they are closed and the waiting scrape is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_keep_scrapes_out() {
    use csi_shim::metrics::http::{HEADER_TIMEOUT, MAX_CONNECTIONS};
    let mut d = driver().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let endpoint = Endpoint::new(d.backend.clone(), true, None);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, endpoint, async {
        let _ = stopped.await;
    }));
    let started = std::time::Instant::now();
    let (response, idle) = tokio::task::spawn_blocking(move || {
        // Every slot taken by a request that never ends, and more waiting behind them.
        let idle: Vec<std::net::TcpStream> = (0..MAX_CONNECTIONS + 4)
            .map(|_| {
                let mut s = std::net::TcpStream::connect(addr).expect("connect");
                s.write_all(b"GET /metr").expect("half a request");
                s
            })
            .collect();
        (get(addr, "/metrics"), idle)
    })
    .await
    .expect("scrape");
    assert!(response.starts_with("HTTP/1.0 200 "), "{response}");
    let took = started.elapsed();
    assert!(took < HEADER_TIMEOUT * 3, "served after {took:?}");
    drop(idle);
    let _ = stop.send(());
    server.await.expect("metrics server ends");
    d.stop.take().map(|s| s.send(()));
}
