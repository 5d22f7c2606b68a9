//! Faults on the wire, injected by a TCP relay (`support::Relay`) between the
//! gateway and a real backend, or between a client and the gateway: every
//! failure ends in the README's status (or a cut connection once a response
//! has started), the gateway does not panic, the fence is kept, the next
//! request through the healed path succeeds (the upstream pool is not
//! poisoned), and memory stays bounded.

#[path = "../support/mod.rs"]
mod support;

use std::time::Duration;

use support::{
    http, metric, try_http, wait_until, Backend, Fault, GatewayProcess, Relay, HANG_GUARD,
};

/// The gateway in front of `relay`, which is in front of `backend`.
fn through_relay(backend: &Backend, fault: Fault, extra: &[&str]) -> (Relay, GatewayProcess) {
    let relay = Relay::start(backend.addr(), fault);
    let url = relay.url();
    let mut args = vec!["--upstream", url.as_str()];
    args.extend_from_slice(extra);
    (relay, GatewayProcess::start(&args))
}

/// After a fault: no panic, and a fresh request through the healed relay
/// reaches the backend.
fn heals(gw: &GatewayProcess, relay: &Relay, backend: &Backend, token: u64) {
    relay.set(Fault::None);
    let before = backend.count();
    let resp = gw.put("/after", token);
    assert_eq!(resp.status, 200, "{}\n{}", resp.text(), gw.stderr());
    assert_eq!(backend.count(), before + 1);
    assert!(!gw.stderr().contains("panicked"), "{}", gw.stderr());
}

#[test]
fn a_backend_that_refuses_is_502_and_the_fence_stays() {
    let backend = Backend::start();
    let (relay, gw) = through_relay(&backend, Fault::Refuse, &[]);
    let resp = gw.put("/a", 5);
    let err = resp.assert_gateway_error(502, "upstream_unavailable");
    assert!(err["detail"].is_string());
    assert_eq!(
        gw.fence("/a"),
        Some(5),
        "an upstream failure rolls nothing back"
    );
    assert_eq!(backend.count(), 0);
    gw.put("/a", 4).assert_gateway_error(409, "stale_token");
    heals(&gw, &relay, &backend, 1);
}

#[test]
fn a_reset_before_the_response_head_is_502() {
    let backend = Backend::start();
    for fault in [
        Fault::ResetAt(0),
        Fault::ResetAt(12),
        Fault::CloseAt(0),
        Fault::CloseAt(12),
    ] {
        let (relay, gw) = through_relay(&backend, fault, &[]);
        let resp = gw.put("/a", 7);
        resp.assert_gateway_error(502, "upstream_unavailable");
        assert_eq!(gw.fence("/a"), Some(7), "{fault:?}");
        heals(&gw, &relay, &backend, 7);
    }
}

#[test]
fn a_response_cut_mid_body_cuts_the_client_and_the_pool_recovers() {
    let backend = Backend::start();
    for fault in [Fault::CloseAt(4_000), Fault::ResetAt(4_000)] {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("access.log");
        let (relay, gw) = through_relay(&backend, fault, &["--access-log", log.to_str().unwrap()]);
        let resp = try_http(
            gw.data_addr(),
            "PUT",
            "/big",
            &[
                ("X-Fencing-Token", "3"),
                ("X-Test-Response-Bytes", "100000"),
            ],
            b"x",
        );
        // Headers were relayed, so the client cannot get a status for the
        // failure: its connection is cut short of the announced length.
        match resp {
            Err(_) => {}
            Ok(resp) => assert!(
                resp.status == 200 && resp.body.len() < 100_000,
                "{fault:?}: got a whole answer {} ({} bytes)",
                resp.status,
                resp.body.len()
            ),
        }
        assert_eq!(gw.fence("/big"), Some(3));
        // The gateway knows: a cut response in the metrics, and an
        // `upstream_error` line with the status the client already had.
        let cut = || metric(&gw.metrics(), "fencegate_responses_cut_total");
        assert!(
            wait_until(HANG_GUARD, || cut() == Some(1.0)),
            "{fault:?}: {:?}",
            cut()
        );
        let line = || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|l| l["path"] == "/big")
        };
        assert!(
            wait_until(HANG_GUARD, || line().is_some()),
            "{fault:?}: no log line"
        );
        let line = line().unwrap();
        assert_eq!(line["outcome"], "upstream_error", "{fault:?}: {line}");
        assert_eq!(
            (&line["status"], &line["upstream_status"]),
            (&200.into(), &200.into())
        );
        heals(&gw, &relay, &backend, 3);
        assert_eq!(cut(), Some(1.0), "{fault:?}: a whole response is not cut");
    }
}

#[test]
fn a_stalled_response_body_is_cut_after_the_upstream_timeout() {
    let backend = Backend::start();
    let (relay, gw) = through_relay(
        &backend,
        Fault::StallAt(4_000),
        &["--upstream-timeout", "1"],
    );
    let started = std::time::Instant::now();
    let resp = try_http(
        gw.data_addr(),
        "GET",
        "/stall",
        &[("X-Test-Response-Bytes", "100000")],
        b"",
    );
    assert!(
        resp.as_ref().map_or(true, |r| r.body.len() < 100_000),
        "a stalled body must not complete"
    );
    assert!(
        started.elapsed() < HANG_GUARD,
        "the gateway cut the stalled body"
    );
    heals(&gw, &relay, &backend, 1);
}

#[test]
fn a_stalled_response_head_is_504_and_the_fence_stays() {
    let backend = Backend::start();
    let (relay, gw) = through_relay(&backend, Fault::StallAt(0), &["--upstream-timeout", "0.5"]);
    let resp = gw.put("/slow", 9);
    resp.assert_gateway_error(504, "upstream_timeout");
    assert_eq!(gw.fence("/slow"), Some(9));
    heals(&gw, &relay, &backend, 9);
}

#[test]
fn a_trickled_response_arrives_whole() {
    let backend = Backend::start();
    let (_relay, gw) = through_relay(&backend, Fault::Trickle(1), &[]);
    let resp = http(
        gw.data_addr(),
        "GET",
        "/trickle",
        &[("X-Test-Response-Bytes", "300")],
        b"",
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body.len(), 300);
}

/// A client whose connection is reset while its response streams: the
/// request ends, its in-flight guard goes, and a higher token on the key is
/// not held up behind it.
#[test]
fn a_client_reset_mid_response_releases_the_key() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let relay = Relay::start(gw.data_addr(), Fault::ResetAt(2_000));
    let resp = try_http(
        relay.addr(),
        "PUT",
        "/k",
        &[
            ("X-Fencing-Token", "1"),
            ("X-Test-Response-Bytes", "10000000"),
        ],
        b"x",
    );
    assert!(resp.map_or(true, |r| r.body.len() < 10_000_000));
    // Token 2 waits only while token 1 is in flight: it must go through.
    let next = gw.put("/k", 2);
    assert_eq!(next.status, 200, "{}", next.text());
    assert!(!gw.stderr().contains("panicked"));
}

/// A client that sends its request and then half-closes (shutdown of its
/// write side, as `nc -N` does) is taken for gone, like one that closed: its
/// request is cancelled and the key released at once (README,
/// "Forwarding"), rather than held until the backend answers.
#[test]
fn a_half_closing_client_is_taken_for_gone_and_releases_its_key() {
    use std::io::Write;
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let mut stream = std::net::TcpStream::connect(gw.data_addr()).unwrap();
    stream
        .write_all(
            b"PUT /half HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 4\r\n\
              X-Test-Hold: never\r\nContent-Length: 2\r\n\r\nhi",
        )
        .unwrap();
    assert!(backend.wait_for(HANG_GUARD, |r| r.len() == 1));
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    // 5 waits only while 4 is in flight: it must go through without the
    // backend ever answering 4.
    let data = gw.data_addr();
    let t5 =
        std::thread::spawn(move || http(data, "PUT", "/half", &[("X-Fencing-Token", "5")], b"x"));
    let went = backend.wait_for(Duration::from_secs(10), |r| r.len() == 2);
    backend.release("never");
    assert_eq!(t5.join().unwrap().status, 200);
    assert!(went, "5 waited for a half-closed client's request");
    drop(stream);
}

/// Hundreds of faulty exchanges leave the gateway's memory where it was
/// (within a bound far below what leaking a buffer per exchange would cost).
#[test]
fn memory_stays_bounded_under_repeated_faults() {
    let backend = Backend::start();
    let (relay, gw) = through_relay(&backend, Fault::None, &["--upstream-timeout", "2"]);
    let warm = gw.put("/m", 1);
    assert_eq!(warm.status, 200);
    let before = gw.rss_bytes().unwrap();
    let faults = [
        Fault::Refuse,
        Fault::ResetAt(5),
        Fault::CloseAt(3_000),
        Fault::ResetAt(3_000),
    ];
    for i in 0..400 {
        relay.set(faults[i % faults.len()]);
        let _ = try_http(
            gw.data_addr(),
            "PUT",
            "/m",
            &[("X-Fencing-Token", "1"), ("X-Test-Response-Bytes", "65536")],
            &[b'x'; 4096],
        );
    }
    relay.set(Fault::None);
    assert!(wait_until(Duration::from_secs(5), || gw
        .put("/m", 1)
        .status
        == 200));
    let after = gw.rss_bytes().unwrap();
    let grown = after.saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "RSS grew by {} KiB over 400 faulty exchanges ({} -> {} KiB)",
        grown >> 10,
        before >> 10,
        after >> 10
    );
    eprintln!(
        "400 faulty exchanges over {} connections: RSS {} -> {} KiB",
        relay.connections(),
        before >> 10,
        after >> 10
    );
    assert!(relay.connections() >= 300, "{}", relay.connections());
    assert!(!gw.stderr().contains("panicked"));
}
