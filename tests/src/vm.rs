//! Virtual hosts for the tests that need several real kernels on one LUN: each a QEMU guest
//! booted by `tests/vm/run` with Debian's kernel, running `tests/vm/agent` (scripts from the
//! host, through the guest's scratch share) and with one TCP port forwarded into it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `tests/vm` directory of this checkout.
pub fn vm_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("vm")
}

/// A guest: its `tests/vm/run` process, scratch share and forwarded port.
pub struct Vm {
    /// Its host name.
    pub name: String,
    /// This machine's port forwarded to the guest's port 7000.
    pub port: u16,
    scratch: PathBuf,
    console: PathBuf,
    run: Child,
    next: u32,
}

impl Vm {
    /// Boots guest `name` with `lun` as its `/dev/vda` (shared with other guests), its
    /// scratch share and console log under `dir`, this machine's `port` forwarded to its
    /// port 7000, and the link `link` to another guest (`tests/vm/run --link`); returns once
    /// its agent is ready.
    pub fn boot(name: &str, lun: &Path, dir: &Path, port: u16, link: Option<&str>) -> Self {
        let scratch = dir.join(format!("{name}.scratch"));
        // A guest booted again under the same name starts with an empty share.
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).expect("scratch dir");
        let console = dir.join(format!("{name}.console"));
        let log = std::fs::File::create(&console).expect("console log");
        let mut cmd = Command::new(vm_dir().join("run"));
        if let Some(link) = link {
            cmd.args(["--link", link]);
        }
        let run = cmd
            .args(["--name", name, "--mem", "2048", "--timeout", "1800"])
            .arg("--lun")
            .arg(lun)
            .arg("--fwd")
            .arg(format!("{port}:7000"))
            .arg("--scratch")
            .arg(&scratch)
            .arg("--")
            .arg(vm_dir().join("agent"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("tests/vm/run");
        let mut vm = Self {
            name: name.to_owned(),
            port,
            scratch,
            console,
            run,
            next: 0,
        };
        let t = Instant::now();
        while !vm.scratch.join("ready").exists() {
            if let Ok(Some(st)) = vm.run.try_wait() {
                panic!(
                    "VM {name} ended ({st}) before its agent started:\n{}",
                    vm.console()
                );
            }
            assert!(
                t.elapsed() < Duration::from_secs(300),
                "VM {name}: no agent after 300 s:\n{}",
                vm.console()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        vm
    }

    /// The guest's interface on its link to another guest (`tests/vm/run --link`).
    pub fn link_interface(&self) -> String {
        let f = self.scratch.join("link-if");
        std::fs::read_to_string(&f)
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|e| panic!("VM {}: no link interface ({e})", self.name))
    }

    /// The guest's scratch share on this machine (its `/run/lvmeta-vm`).
    pub fn scratch(&self) -> &Path {
        &self.scratch
    }

    /// What the guest printed on its console so far.
    pub fn console(&self) -> String {
        std::fs::read_to_string(&self.console).unwrap_or_default()
    }

    /// Posts `script` (sh) to the guest's agent; returns its number for [`Vm::wait`].
    pub fn post(&mut self, script: &str) -> u32 {
        self.next += 1;
        let n = self.next;
        let req = self.scratch.join("req");
        let tmp = req.join(format!("{n}.tmp-script"));
        std::fs::write(&tmp, script).expect("write the script");
        std::fs::rename(&tmp, req.join(format!("{n}.sh"))).expect("post the script");
        n
    }

    /// Waits for posted script `n`: its exit code and output.
    pub fn wait(&mut self, n: u32) -> (i32, String) {
        let req = self.scratch.join("req");
        let rc = req.join(format!("{n}.rc"));
        let t = Instant::now();
        while !rc.exists() {
            if let Ok(Some(st)) = self.run.try_wait() {
                panic!("VM {} ended ({st}):\n{}", self.name, self.console());
            }
            assert!(
                t.elapsed() < Duration::from_secs(600),
                "VM {}: script {n} still running after 600 s",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let code = std::fs::read_to_string(&rc)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(-1);
        let out = std::fs::read_to_string(req.join(format!("{n}.out"))).unwrap_or_default();
        (code, out)
    }

    /// Runs `script` in the guest: its exit code and output.
    pub fn sh(&mut self, script: &str) -> (i32, String) {
        let n = self.post(script);
        self.wait(n)
    }

    /// Runs `script` in the guest, which must succeed; returns its output.
    pub fn ok(&mut self, script: &str) -> String {
        let (code, out) = self.sh(script);
        assert_eq!(code, 0, "VM {}: {script}\n{out}", self.name);
        out
    }

    /// Is the guest still running (not powered off, not reset by its watchdog: QEMU runs
    /// with -no-reboot)?
    pub fn alive(&mut self) -> bool {
        matches!(self.run.try_wait(), Ok(None))
    }

    /// Powers the guest off hard (SIGKILL to QEMU: no clean-up of any kind).
    pub fn power_off(&mut self) {
        if let Some(pid) = std::fs::read_to_string(self.scratch.join("qemu.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.run.wait();
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if self.run.try_wait().ok().flatten().is_none() {
            self.power_off();
        }
    }
}
