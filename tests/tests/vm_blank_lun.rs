//! The driver given only the LUN and the VG name, on real hosts: two QEMU guests
//! (`tests/vm/run`, Debian's kernel) on one blank LUN image, their sanlock daemons with the
//! watchdog (wdmd over softdog), `dm_thin_pool` and `nbd` unloaded, no host id and no VG:
//! - a controller (`--create-vg`) on A and node plugins on A and B, all started at once,
//!   end with one shared VG that stock lvm2 finds clean, both nodes in its lockspace under
//!   distinct ids, and the modules loaded by the plugins;
//! - B's plugin, restarted after B left the lockspace, joins under its id again;
//! - a thin volume is created and staged on B.
//!
//! Runs on a machine with QEMU (not inside a VM); prints SKIPPED without it.

use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use lvmeta_tests::csi_hosts::{cap, create_request, MIB};
use lvmeta_tests::guest::{self, LUN};
use lvmeta_tests::{privileged, workspace_bin};

#[test]
fn a_blank_lun_and_its_name_are_all_the_driver_needs() {
    let test = "a_blank_lun_and_its_name_are_all_the_driver_needs";
    if std::env::var("LVMETA_VM").is_ok_and(|v| v == "1") {
        lvmeta_tests::skipped(&format!("{test}: boots VMs itself; runs on the host"));
        return;
    }
    let tools = [
        "qemu-system-x86_64",
        "busybox",
        "depmod",
        "apt-get",
        "dpkg-deb",
    ];
    if !privileged(test, &tools) {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let (mut vm_a, mut vm_b) = guest::two_guests(dir.path(), 1536 * MIB as u64);
    for vm in [&mut vm_a, &mut vm_b] {
        vm.ok("rmmod dm_thin_pool nbd && test ! -d /sys/module/dm_thin_pool && test ! -d /sys/module/nbd");
    }
    // The controller on A, in the background: it makes the VG once its claim settles.
    vm_a.ok(&format!(
        "export SANLOCK_RUN_DIR=/run/t/san RUST_LOG=info\n\
         setsid {csi} --endpoint /run/t/ctl.sock --devices {LUN} --vg vg --create-vg \
         --io-timeout {io} --locking-dir /run/t/lock \
         >>/run/lvmeta-vm/ctl.log 2>&1 </dev/null &",
        csi = workspace_bin("csi-shim", "csi-shim").display(),
        io = guest::IO_TIMEOUT,
    ));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let extra = [
            format!("--nbd-ip {}", guest::link_addr(1, &vm_a.link_interface())),
            format!("--nbd-ip {}", guest::link_addr(2, &vm_b.link_interface())),
        ];
        let (mut a, mut b) =
            guest::start_shims_auto(vm_a, vm_b, [extra[0].as_str(), extra[1].as_str()]).await;
        eprintln!(
            "vm_blank_lun: node-a joined as {}, node-b as {}",
            a.id, b.id
        );
        assert_ne!(a.id, b.id, "two hosts under one id");
        let ctl = std::fs::read_to_string(a.vm.scratch().join("ctl.log")).unwrap_or_default();
        assert!(ctl.contains("made the VG on blank devices"), "{ctl}");
        for g in [&mut a, &mut b] {
            g.vm.ok("test -d /sys/module/dm_thin_pool && test -d /sys/module/nbd");
            assert_eq!(g.ready().await, Some(true), "{} not ready", g.vm.name);
        }

        // B leaves the lockspace; its plugin started again joins under the same id.
        let id_b = b.id;
        guest::stop_shim(&mut b);
        guest::leave(&mut b.vm, id_b);
        b.restart(&extra[1]).await;
        assert_eq!(
            guest::joined_id(&mut b.vm),
            id_b,
            "node-b's id after a restart"
        );

        // A thin volume made through A's controller, staged on B.
        let c = cap(Access::SingleNodeWriter, None);
        let vol = a
            .controller
            .create_volume(create_request("pvc-blank", "thin", 64 * MIB, &c, None))
            .await
            .expect("CreateVolume")
            .into_inner()
            .volume
            .expect("volume")
            .volume_id;
        b.stage(&vol, &c).await.expect("NodeStageVolume on B");
        b.vm.ok("dmsetup table | grep -q ' thin-pool '");
        b.unstage(&vol).await.expect("NodeUnstageVolume on B");

        // Stock lvm2 finds the VG the driver made clean.
        b.vm.ok(&format!(
            "lvm vgck --devices {LUN} --config global/use_lvmlockd=1 vg 2>&1"
        ));
        let pvs = b.vm.ok(&format!(
            "lvm pvs --devices {LUN} --config global/use_lvmlockd=1 --noheadings \
             -o vg_name,vg_lock_type,pv_mda_size --units m 2>/dev/null"
        ));
        let words: Vec<&str> = pvs.split_whitespace().collect();
        assert_eq!(words[..2], ["vg", "sanlock"], "{pvs}");
        eprintln!("vm_blank_lun: the PV's metadata area: {}", words[2]);
    });
}
