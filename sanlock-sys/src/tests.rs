//! The bindings against the installed C headers: every constant's value, every struct's size
//! and field offsets, every declared function bound; and one call into the library.

use std::collections::BTreeSet;
use std::mem::{offset_of, size_of};
use std::process::Command;

use super::*;

/// Must the header checks run (CI), or may they be skipped without a C compiler? (The rule
/// of `lvmeta::testing::privileged_required`, written again: sanlock-sys sits below lvmeta.)
fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("LVMETA_REQUIRE_PRIVILEGED").is_ok_and(|v| v == "1")
}

const INCLUDES: &str = "#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n\
#include <sanlock.h>\n#include <sanlock_admin.h>\n#include <sanlock_resource.h>\n\
#include <sanlock_rv.h>\n#include <sanlock_direct.h>\n";

/// Compiles and runs `body` (inside `main`) against the headers; `None` when no C compiler.
fn run_c(name: &str, body: &str) -> Option<String> {
    let dir = std::env::temp_dir().join(format!("sanlock-sys-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("check.c");
    let exe = dir.join("check");
    std::fs::write(
        &src,
        format!("{INCLUDES}int main(void) {{\n{body}\nreturn 0;\n}}\n"),
    )
    .expect("write C");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc).arg(&src).arg("-o").arg(&exe).output();
    let out = match built {
        Ok(o) if o.status.success() => Command::new(&exe).output().expect("run check"),
        Ok(o) => panic!("{cc} failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) if !required() => {
            eprintln!("SKIPPED sanlock-sys header check {name}: no C compiler ({cc}: {e})");
            return None;
        }
        Err(e) => panic!("{cc}: {e} (CI: the header checks must run)"),
    };
    let _ = std::fs::remove_dir_all(&dir);
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn constants_match_the_headers() {
    let body: String = consts::ALL
        .iter()
        .map(|(n, _)| format!("printf(\"%s %lld\\n\", \"{n}\", (long long)({n}));\n"))
        .collect();
    let Some(out) = run_c("consts", &body) else {
        return;
    };
    let got: Vec<(String, i64)> = out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, v)| (n.to_owned(), v.parse().expect("number")))
        .collect();
    let want: Vec<(String, i64)> = consts::ALL
        .iter()
        .map(|(n, v)| ((*n).to_owned(), *v))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn struct_layouts_match_the_headers() {
    macro_rules! layout {
        ($t:ident { $($f:ident $(= $c:literal)?),* }) => {{
            let mut rust = vec![(stringify!($t).to_owned(), "sizeof".to_owned(), size_of::<$t>())];
            let mut c = format!("printf(\"{} sizeof %zu\\n\", sizeof(struct {}));\n", stringify!($t), stringify!($t));
            $(
                let cname = layout!(@name $f $(= $c)?);
                rust.push((stringify!($t).to_owned(), cname.to_owned(), offset_of!($t, $f)));
                c.push_str(&format!(
                    "printf(\"{} {} %zu\\n\", offsetof(struct {}, {}));\n",
                    stringify!($t), cname, stringify!($t), cname
                ));
            )*
            (rust, c)
        }};
        (@name $f:ident = $c:literal) => { $c };
        (@name $f:ident) => { stringify!($f) };
    }
    let all = [
        layout!(sanlk_disk {
            path,
            offset,
            pad1,
            pad2
        }),
        layout!(sanlk_resource {
            lockspace_name,
            name,
            lver,
            data64,
            data32,
            unused,
            flags,
            num_disks,
            disks
        }),
        layout!(sanlk_rindex {
            flags,
            max_resources,
            unused,
            lockspace_name,
            disk
        }),
        layout!(sanlk_rentry {
            name,
            offset,
            flags,
            unused
        }),
        layout!(sanlk_options { owner_name, flags, len, str_ = "str" }),
        layout!(sanlk_lockspace {
            name,
            host_id,
            flags,
            host_id_disk
        }),
        layout!(sanlk_host {
            host_id,
            generation,
            timestamp,
            io_timeout,
            flags
        }),
        layout!(sanlk_host_event {
            host_id,
            generation,
            event,
            data
        }),
    ];
    let body: String = all.iter().map(|(_, c)| c.as_str()).collect();
    let Some(out) = run_c("layout", &body) else {
        return;
    };
    let got: Vec<(String, String, usize)> = out
        .lines()
        .map(|l| {
            let v: Vec<&str> = l.split(' ').collect();
            (
                v[0].to_owned(),
                v[1].to_owned(),
                v[2].parse().expect("number"),
            )
        })
        .collect();
    let want: Vec<(String, String, usize)> = all.into_iter().flat_map(|(r, _)| r).collect();
    assert_eq!(got, want);
}

#[test]
fn every_declared_function_is_bound() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-E", "-P", "-x", "c", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn();
    let mut child = match out {
        Ok(c) => c,
        Err(e) if !required() => {
            eprintln!("SKIPPED sanlock-sys function check: no C compiler ({cc}: {e})");
            return;
        }
        Err(e) => panic!("{cc}: {e}"),
    };
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), INCLUDES.as_bytes())
        .expect("feed");
    let pre = child.wait_with_output().expect("preprocess");
    let text = String::from_utf8_lossy(&pre.stdout);
    let names = |s: &str, before: &str| -> BTreeSet<String> {
        s.split(before)
            .skip(1)
            .filter_map(|rest| {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                rest[name.len()..]
                    .trim_start()
                    .starts_with('(')
                    .then(|| format!("sanlock_{name}"))
            })
            .collect()
    };
    let declared = names(&text.replace('*', " "), " sanlock_");
    let ours = names(include_str!("lib.rs"), "pub fn sanlock_");
    assert!(
        declared.len() > 40,
        "headers declare {} functions?",
        declared.len()
    );
    assert_eq!(ours, declared, "bound functions differ from the headers");
}

#[test]
fn the_client_library_links_and_answers() {
    // SAFETY: sanlock_strerror returns a pointer to a static string (or NULL) for any code.
    let s = unsafe { sanlock_strerror(SANLK_ACQUIRE_IDLIVE) };
    assert!(!s.is_null());
    // SAFETY: non-null, NUL-terminated, static.
    let msg = unsafe { std::ffi::CStr::from_ptr(s) }.to_string_lossy();
    assert!(msg.to_lowercase().contains("held"), "{msg}");
}
