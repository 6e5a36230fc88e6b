//! `deploy/` rendered by kustomize as `kubectl apply -k deploy/` renders it, with and without
//! its components, and every object checked against the Kubernetes API types (k8s-openapi,
//! Kubernetes 1.34) strictly: an object must read as its type and write back unchanged, so an
//! unknown or misspelt field fails. Then what ties the manifests to the driver: the driver
//! name, the node label both pods are placed by, the image tag of this version, the one ConfigMap, the
//! volumes, accounts and roles every object names.
//!
//! kustomize: `KUSTOMIZE` (a kustomize binary), else `kustomize`, else `kubectl kustomize`
//! (CI installs kustomize 4.5.4). Without one the test skips visibly; with CI=true it fails.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PodSpec, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass, VolumeAttributesClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use common::skip_or_fail;

const SNAPSHOTS: &str = "components/snapshots";
const VACS: &str = "components/volume-attributes-classes";
const MONITORING: &str = "components/monitoring";
const NBD_POLICY: &str = "components/nbd-network-policy";

/// snapshot.storage.k8s.io/v1 VolumeSnapshotClass (a CRD of external-snapshotter, so not in
/// k8s-openapi): the fields of its schema.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct VolumeSnapshotClass {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    driver: String,
    deletion_policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parameters: Option<BTreeMap<String, String>>,
}

/// monitoring.coreos.com/v1 PodMonitor (prometheus-operator's CRD): the fields used here.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodMonitor {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: PodMonitorSpec,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodMonitorSpec {
    selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    pod_metrics_endpoints: Vec<PodMetricsEndpoint>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodMetricsEndpoint {
    port: String,
    path: String,
    interval: String,
}

/// monitoring.coreos.com/v1 PrometheusRule: its spec is a Prometheus rule file
/// (`csi-shim/tests/metrics.rs` loads it into a real Prometheus).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PrometheusRule {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: RuleFile,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    rules: Vec<Rule>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    alert: String,
    expr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r#for: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// The command that renders a kustomization directory, if there is one.
fn kustomize() -> Option<Vec<String>> {
    let works = |cmd: &[&str]| {
        Command::new(cmd[0])
            .args(&cmd[1..])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if let Ok(bin) = std::env::var("KUSTOMIZE") {
        return Some(vec![bin, "build".into()]);
    }
    if works(&["kustomize", "version"]) {
        return Some(vec!["kustomize".into(), "build".into()]);
    }
    if works(&["kubectl", "kustomize", "--help"]) {
        return Some(vec!["kubectl".into(), "kustomize".into()]);
    }
    let msg = "deploy rendering: no kustomize (set KUSTOMIZE, or install kustomize or kubectl)";
    skip_or_fail(msg);
    None
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read deploy/") {
        let e = e.expect("entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

/// deploy/ as rendered with `components` enabled the way its kustomization.yaml says (the
/// `components: []` line replaced), as JSON objects in kustomize's order.
fn render(cmd: &[String], components: &[&str]) -> Vec<Value> {
    let deploy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let dir = tempfile::tempdir().expect("tempdir");
    copy_tree(&deploy, dir.path());
    let k = dir.path().join("kustomization.yaml");
    let text = std::fs::read_to_string(&k).expect("kustomization.yaml");
    assert_eq!(
        text.matches("\ncomponents: []\n").count(),
        1,
        "one empty components line"
    );
    if !components.is_empty() {
        let list = components
            .iter()
            .map(|c| format!("  - {c}\n"))
            .collect::<String>();
        let text = text.replace("\ncomponents: []\n", &format!("\ncomponents:\n{list}"));
        std::fs::write(&k, text).expect("write kustomization.yaml");
    }
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .arg(dir.path())
        .output()
        .expect("run kustomize");
    assert!(
        out.status.success(),
        "{cmd:?} with {components:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).expect("utf-8");
    serde_yaml_ng::Deserializer::from_str(&yaml)
        .map(|doc| Value::deserialize(doc).expect("rendered YAML"))
        .collect()
}

/// The first place where `back` (written from the typed object) differs from `orig`.
fn difference(orig: &Value, back: &Value, path: &str) -> Option<String> {
    match (orig, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    None => return Some(format!("{p}: unknown field")),
                    Some(w) => {
                        if let Some(d) = difference(v, w, &p) {
                            return Some(d);
                        }
                    }
                }
            }
            b.keys()
                .find(|k| !a.contains_key(*k))
                .map(|k| format!("{path}.{k}: added when written back"))
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (v, w))| difference(v, w, &format!("{path}[{i}]"))),
        _ if orig == back => None,
        _ => Some(format!("{path}: {orig} reads back as {back}")),
    }
}

/// `obj` read as `T` and written back unchanged.
fn strict<T: DeserializeOwned + Serialize>(obj: &Value) -> Result<T, String> {
    let typed: T = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    match difference(obj, &back, "") {
        Some(d) => Err(d),
        None => Ok(typed),
    }
}

/// Checks `obj` strictly against the API type its apiVersion and kind name.
fn check_type(obj: &Value) -> Result<(), String> {
    fn is<T: k8s_openapi::Resource>(api: &str, kind: &str) -> bool {
        api == T::API_VERSION && kind == T::KIND
    }
    let api = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    macro_rules! typed {
        ($($t:ty),*) => {
            $(if is::<$t>(api, kind) {
                return strict::<$t>(obj).map(drop);
            })*
        };
    }
    typed!(
        Namespace,
        ServiceAccount,
        ConfigMap,
        ClusterRole,
        ClusterRoleBinding,
        Role,
        RoleBinding,
        CSIDriver,
        StorageClass,
        VolumeAttributesClass,
        Deployment,
        DaemonSet,
        NetworkPolicy
    );
    if (api, kind) == ("monitoring.coreos.com/v1", "PodMonitor") {
        return strict::<PodMonitor>(obj).map(drop);
    }
    if (api, kind) == ("monitoring.coreos.com/v1", "PrometheusRule") {
        let r = strict::<PrometheusRule>(obj)?;
        let mut rules = r.spec.groups.iter().flat_map(|g| &g.rules);
        return rules.try_for_each(|r| match r.labels.get("severity").map(String::as_str) {
            Some("warning" | "critical") => Ok(()),
            s => Err(format!("alert {}: severity {s:?}", r.alert)),
        });
    }
    if (api, kind) == ("snapshot.storage.k8s.io/v1", "VolumeSnapshotClass") {
        let c = strict::<VolumeSnapshotClass>(obj)?;
        return ["Delete", "Retain"]
            .contains(&c.deletion_policy.as_str())
            .then_some(())
            .ok_or_else(|| format!("deletionPolicy {}", c.deletion_policy));
    }
    Err(format!("{api} {kind}: not a type this check knows"))
}

fn name(obj: &Value) -> String {
    format!(
        "{} {}",
        obj["kind"].as_str().unwrap_or("?"),
        obj["metadata"]["name"].as_str().unwrap_or("?")
    )
}

fn of_kind<'a>(objs: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    objs.iter().filter(move |o| o["kind"] == kind)
}

/// What ties the objects to each other and to the driver.
fn check_consistency(objs: &[Value]) {
    assert_eq!(objs[0]["kind"], "Namespace", "the namespace comes first");
    let ns = objs[0]["metadata"]["name"]
        .as_str()
        .expect("namespace name");
    let cluster_scoped = [
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CSIDriver",
        "StorageClass",
        "VolumeSnapshotClass",
        "VolumeAttributesClass",
    ];
    for o in objs {
        let kind = o["kind"].as_str().expect("kind");
        let want = (!cluster_scoped.contains(&kind)).then_some(ns);
        assert_eq!(o["metadata"]["namespace"].as_str(), want, "{}", name(o));
    }
    let config: Vec<_> = of_kind(objs, "ConfigMap").collect();
    assert_eq!(config.len(), 1, "one ConfigMap holds LUN and VG");
    let config_name = config[0]["metadata"]["name"].as_str().expect("name");
    let vg = config[0]["data"]["vg"].as_str().expect("data.vg");
    assert!(config[0]["data"]["lun"].as_str().is_some(), "data.lun");

    let driver = csi_shim::DRIVER_NAME;
    let drivers: Vec<_> = of_kind(objs, "CSIDriver").collect();
    assert_eq!(drivers.len(), 1);
    assert_eq!(drivers[0]["metadata"]["name"], driver);
    assert_eq!(drivers[0]["spec"]["storageCapacity"], true);
    for sc in of_kind(objs, "StorageClass") {
        assert_eq!(sc["provisioner"], driver, "{}", name(sc));
        assert_eq!(
            sc["parameters"]["vg"],
            vg,
            "{}: the VG of the ConfigMap",
            name(sc)
        );
    }
    for c in of_kind(objs, "VolumeSnapshotClass") {
        assert_eq!(c["driver"], driver);
    }
    for c in of_kind(objs, "VolumeAttributesClass") {
        assert_eq!(c["driverName"], driver);
    }

    let accounts: BTreeSet<_> = of_kind(objs, "ServiceAccount")
        .map(|o| o["metadata"]["name"].as_str().expect("name"))
        .collect();
    for kind in ["RoleBinding", "ClusterRoleBinding"] {
        for b in of_kind(objs, kind) {
            let role = &b["roleRef"];
            assert!(
                of_kind(objs, role["kind"].as_str().expect("roleRef.kind"))
                    .any(|r| r["metadata"]["name"] == role["name"]),
                "{}: no {role}",
                name(b)
            );
            for s in b["subjects"].as_array().into_iter().flatten() {
                let sa = s["name"].as_str().expect("subject name");
                assert!(accounts.contains(sa), "{}: no account {sa}", name(b));
            }
        }
    }

    // deploy/kustomization.yaml's placeholder for the admin's registry, at this version.
    let image = format!(
        "registry.example.com/EDIT-ME/lvmeta:{}",
        env!("CARGO_PKG_VERSION")
    );
    for o in of_kind(objs, "Deployment").chain(of_kind(objs, "DaemonSet")) {
        let spec: PodSpec =
            serde_json::from_value(o["spec"]["template"]["spec"].clone()).expect("pod spec");
        check_pod(&name(o), &spec, config_name, &image, &accounts);
        // The controller is placed before the VG exists (it makes it), so by the admin's
        // label, as the node plugin is, never by the VG's topology label.
        let selector = &o["spec"]["template"]["spec"]["nodeSelector"];
        assert_eq!(selector["lvmeta.csi/lun"], "yes", "{}", name(o));
        let shim = spec.containers.iter().find(|c| c.name == "csi-shim");
        let args = shim.and_then(|c| c.args.clone()).unwrap_or_default();
        let creates = args.iter().any(|a| a == "--create-vg");
        assert_eq!(
            creates,
            o["kind"] == "Deployment",
            "{}: --create-vg",
            name(o)
        );
    }
}

/// Every container: requests, our image at this version, ConfigMap keys of the one ConfigMap,
/// mounts of the pod's volumes, probes on its own ports; the account exists.
fn check_pod(what: &str, spec: &PodSpec, config: &str, image: &str, accounts: &BTreeSet<&str>) {
    if let Some(sa) = &spec.service_account_name {
        assert!(accounts.contains(sa.as_str()), "{what}: no account {sa}");
    }
    assert!(spec.priority_class_name.is_some(), "{what}: priority class");
    let volumes: BTreeSet<_> = spec.volumes.iter().flatten().map(|v| &v.name).collect();
    let all = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    for c in all {
        let at = format!("{what} container {}", c.name);
        let img = c.image.as_deref().unwrap_or_default();
        if img.split(':').next() == image.split(':').next() {
            assert_eq!(img, image, "{at}");
        } else {
            assert!(img.contains(":v"), "{at}: a pinned sidecar version ({img})");
        }
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        assert!(
            requests.is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory")),
            "{at}: requests"
        );
        for m in c.volume_mounts.iter().flatten() {
            assert!(volumes.contains(&m.name), "{at}: no volume {}", m.name);
        }
        for e in c.env.iter().flatten() {
            let key_ref = e
                .value_from
                .as_ref()
                .and_then(|v| v.config_map_key_ref.as_ref());
            if let Some(r) = key_ref {
                assert_eq!(r.name, config, "{at}: env {}", e.name);
            }
        }
        let ports: BTreeSet<_> = c
            .ports
            .iter()
            .flatten()
            .filter_map(|p| p.name.as_deref())
            .collect();
        if let Some(get) = c.liveness_probe.as_ref().and_then(|p| p.http_get.as_ref()) {
            use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
            match &get.port {
                IntOrString::String(p) => assert!(ports.contains(p.as_str()), "{at}: port {p}"),
                IntOrString::Int(_) => {}
            }
        }
        if c.name == "csi-shim" {
            assert!(c.liveness_probe.is_some(), "{at}: a liveness probe");
        }
    }
}

#[test]
fn deploy_renders_to_objects_the_api_accepts() {
    let Some(cmd) = kustomize() else {
        return;
    };
    let all = [SNAPSHOTS, VACS, MONITORING, NBD_POLICY];
    for components in [
        &[][..],
        &[SNAPSHOTS],
        &[VACS],
        &[MONITORING],
        &[NBD_POLICY],
        &all,
    ] {
        let objs = render(&cmd, components);
        for o in &objs {
            if let Err(e) = check_type(o) {
                panic!("{components:?}: {}: {e}", name(o));
            }
        }
        check_consistency(&objs);
        let kinds: BTreeSet<_> = objs
            .iter()
            .map(|o| o["kind"].as_str().expect("kind"))
            .collect();
        assert_eq!(
            kinds.contains("VolumeSnapshotClass"),
            components.contains(&SNAPSHOTS)
        );
        assert_eq!(
            kinds.contains("VolumeAttributesClass"),
            components.contains(&VACS)
        );
        assert_eq!(
            kinds.contains("NetworkPolicy"),
            components.contains(&NBD_POLICY)
        );
        // The node plugin serves NBD on the node's IP (host network), on port 10809.
        let node = of_kind(&objs, "DaemonSet").next().expect("node plugin");
        let shim = &node["spec"]["template"]["spec"]["containers"][0];
        assert!(
            shim["args"].to_string().contains("--nbd-ip=$(NBD_IP)"),
            "{shim}"
        );
        assert!(shim["env"].to_string().contains("status.hostIP"), "{shim}");
        assert!(shim["ports"].to_string().contains("10809"), "{shim}");
        let deployment = of_kind(&objs, "Deployment").next().expect("controller");
        let containers = deployment["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers");
        let snapshotter = containers.iter().any(|c| c["name"] == "csi-snapshotter");
        assert_eq!(snapshotter, components.contains(&SNAPSHOTS));
        let gated = containers
            .iter()
            .filter(|c| c["args"].to_string().contains("VolumeAttributesClass=true"))
            .count();
        assert_eq!(gated, if components.contains(&VACS) { 2 } else { 0 });
        // VolumeAttributesClass v1 (Kubernetes 1.34) is read by csi-provisioner v6 and
        // csi-resizer v2 on; older ones read v1beta1, which 1.34 serves only when enabled.
        if components.contains(&VACS) {
            for (sidecar, major) in [("csi-provisioner", ":v6."), ("csi-resizer", ":v2.")] {
                let c = containers
                    .iter()
                    .find(|c| c["name"] == sidecar)
                    .expect(sidecar);
                let image = c["image"].as_str().expect("image");
                assert!(image.contains(major), "{sidecar}: {image}");
            }
        }
    }
}

#[test]
fn the_strict_check_refuses_unknown_fields() {
    let good = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "n"}, "data": {"vg": "vg0"}
    });
    assert_eq!(check_type(&good), Ok(()));
    let mut bad = good.clone();
    bad["metadata"]["nmae"] = "x".into();
    assert_eq!(
        check_type(&bad),
        Err(".metadata.nmae: unknown field".into())
    );
    let mut bad = good;
    bad["kind"] = "ConfigMaps".into();
    assert!(check_type(&bad).is_err());
}
