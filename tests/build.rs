//! Sets `cfg(nginx_missing)` when no nginx binary can be found, so the connection-rotation tests
//! (tests/nginx_rotation.rs) show as ignored, with the reason, in the test summary. Under
//! `CI=true` it is never set: CI installs nginx, and a missing one must fail those tests.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(nginx_missing)");
    println!("cargo::rerun-if-env-changed=NGINX");
    println!("cargo::rerun-if-env-changed=PATH");
    println!("cargo::rerun-if-env-changed=CI");
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let found = std::env::var_os("NGINX").is_some() || {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/sbin")])
            .any(|dir| dir.join("nginx").is_file())
    };
    if !found && !ci {
        println!("cargo::rustc-cfg=nginx_missing");
    }
}
