//! The admin listener's `Host` check (DNS rebinding) and bearer scheme:
//! `/admin/*` answers only for `server.admin_allowed_hosts`, the probes and
//! `/metrics` for any `Host`; `Bearer` is case-insensitive; a non-loopback
//! admin listener is warned about at start.

mod common;

use common::{client, pair};

async fn get_with_host(url: String, host: &str) -> (u16, String) {
    let r = client()
        .get(url)
        .header("host", host)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// A foreign `Host` (a rebound DNS name) gets 421 on `/admin/*`, with the
/// key to change; the probes and `/metrics` still answer.
#[tokio::test(flavor = "multi_thread")]
async fn admin_pages_refuse_a_foreign_host_and_probes_answer_any() {
    let (_mock, lg) = pair("");
    let admin = lg.admin_url();
    for path in ["/admin/sessions", "/admin/sessions/abc", "/admin/nothing-here"] {
        let (status, body) = get_with_host(format!("{admin}{path}"), "evil.example:9090").await;
        assert_eq!(status, 421, "{path}: {body}");
        assert!(body.contains("server.admin_allowed_hosts"), "{path}: {body}");
    }
    for path in ["/healthz", "/readyz", "/metrics"] {
        let (status, body) = get_with_host(format!("{admin}{path}"), "10.1.2.3:9090").await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let port = lg.admin.map_or(0, |a| a.port());
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "LocalHost".to_owned(),
    ] {
        let (status, body) = get_with_host(format!("{admin}/admin/sessions"), &host).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    let refused = lg.wait_for_log("admin request refused");
    assert!(
        refused.contains("evil.example"),
        "the refusal is logged with its Host"
    );
}

/// Configured names replace the defaults.
#[tokio::test(flavor = "multi_thread")]
async fn configured_admin_hosts_replace_the_defaults() {
    let (_mock, lg) = pair("admin_allowed_hosts = [\"loopguard.internal\"]");
    let admin = lg.admin_url();
    let (status, body) = get_with_host(format!("{admin}/admin/sessions"), "Loopguard.Internal:9090").await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = get_with_host(format!("{admin}/admin/sessions"), "localhost").await;
    assert_eq!(status, 421);
}

/// `bearer`, `BEARER` and `Bearer` all carry the token (RFC 9110: the
/// scheme is case-insensitive); a wrong token is still refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_bearer_scheme_is_case_insensitive() {
    let (_mock, lg) = pair("admin_token = \"s3cret-admin\"");
    let url = format!("{}/admin/reload", lg.admin_url());
    for value in [
        "bearer s3cret-admin",
        "BEARER s3cret-admin",
        "Bearer  s3cret-admin",
    ] {
        let r = client()
            .post(&url)
            .header("authorization", value)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(r.status(), 401, "{value}");
        assert_ne!(r.status(), 403, "{value}");
    }
    let r = client()
        .post(&url)
        .header("authorization", "bearer wrong")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status(), 401);
}

/// An admin listener on all interfaces is warned about at start; one on
/// loopback is not.
#[tokio::test(flavor = "multi_thread")]
async fn a_non_loopback_admin_listener_is_warned_about() {
    let mock = common::mock();
    let config = common::config_for(&mock.url(), "")
        .replace("admin_listen = \"127.0.0.1:0\"", "admin_listen = \"0.0.0.0:0\"");
    let lg = common::loopguard(&config);
    lg.wait_for_log("the admin listener is not on loopback");
    let (_mock, quiet) = pair("");
    let _ = quiet.wait_for_log("loopguard listening");
    assert!(!quiet.logs().contains("not on loopback"));
}
