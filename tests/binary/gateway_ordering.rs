//! Admission order through the real binary: a lower token in flight is never
//! overtaken, waiters overtaken by a higher token are refused, equal tokens
//! run together, and under a concurrent burst writes reach the backend in
//! non-decreasing token order per key.
//!
//! "In flight" is controlled with the backend's `X-Test-Hold`, so that no
//! test depends on how fast the gateway or the machine is.

#[path = "../support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use support::{http, Backend, Event, GatewayProcess, Resp, HANG_GUARD};

use support::rng::Rng;

fn put_async(
    gw: &GatewayProcess,
    path: &str,
    token: u64,
    extra: &[(&str, &str)],
) -> JoinHandle<Resp> {
    let addr = gw.data_addr();
    let path = path.to_string();
    let token = token.to_string();
    let extra: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    std::thread::spawn(move || {
        let mut headers: Vec<(&str, &str)> = vec![("X-Fencing-Token", &token)];
        headers.extend(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        http(addr, "PUT", &path, &headers, b"body")
    })
}

/// Whether the backend has seen a request with this token.
fn seen(backend: &Backend, token: u64) -> bool {
    backend
        .records()
        .iter()
        .any(|r| r.token_u64() == Some(token))
}

fn seq_of(backend: &Backend, token: u64) -> usize {
    backend
        .records()
        .iter()
        .find(|r| r.token_u64() == Some(token))
        .unwrap_or_else(|| panic!("token {token} never reached the backend"))
        .seq
}

#[test]
fn slow_lower_token_is_not_overtaken() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let t30 = put_async(&gw, "/k", 30, &[("X-Test-Hold", "h30")]);
    assert!(
        backend.wait_for(HANG_GUARD, |r| r.len() == 1),
        "30 never arrived"
    );
    let t31 = put_async(&gw, "/k", 31, &[]);
    // 31 is admitted (the fence is raised) and must now wait for 30.
    assert!(
        support::wait_until(HANG_GUARD, || gw.fence("/k") == Some(31)),
        "31 was never admitted"
    );
    // Give a wrong gateway every chance to forward 31 early.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !seen(&backend, 31),
        "31 reached the backend while 30 was still in flight"
    );
    backend.release("h30");
    assert_eq!(t30.join().unwrap().status, 200);
    let r31 = t31.join().unwrap();
    assert_eq!(r31.status, 200, "{}", r31.text());
    let (s30, s31) = (seq_of(&backend, 30), seq_of(&backend, 31));
    let events = backend.events();
    let pos = |e: Event| events.iter().position(|x| *x == e).unwrap();
    assert!(
        pos(Event::Responded(s30)) < pos(Event::Arrived(s31)),
        "31 arrived before 30 was answered: {events:?}"
    );
}

#[test]
fn slow_lower_token_with_delay_is_not_overtaken() {
    // The same with a plain backend delay instead of a hold: whatever the
    // timing, 31 must arrive after 30's answer.
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let t30 = put_async(&gw, "/d", 30, &[("X-Test-Delay-Ms", "300")]);
    assert!(backend.wait_for(HANG_GUARD, |r| r.len() == 1));
    let r31 = gw.put("/d", 31);
    assert_eq!(r31.status, 200, "{}", r31.text());
    assert_eq!(t30.join().unwrap().status, 200);
    let (s30, s31) = (seq_of(&backend, 30), seq_of(&backend, 31));
    assert!(s30 < s31);
    let events = backend.events();
    let pos = |e: Event| events.iter().position(|x| *x == e).unwrap();
    assert!(
        pos(Event::Responded(s30)) < pos(Event::Arrived(s31)),
        "{events:?}"
    );
}

#[test]
fn waiting_token_overtaken_by_a_higher_one_is_409_overtaken() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let t30 = put_async(&gw, "/k", 30, &[("X-Test-Hold", "h30")]);
    assert!(backend.wait_for(HANG_GUARD, |r| r.len() == 1));
    let t31 = put_async(&gw, "/k", 31, &[]);
    assert!(support::wait_until(HANG_GUARD, || gw.fence("/k") == Some(31)));
    let t32 = put_async(&gw, "/k", 32, &[]);
    // 31 is refused while 30 is still held.
    let r31 = t31.join().unwrap();
    let json = r31.assert_gateway_error(409, "stale_token");
    assert_eq!(json["reason"], "overtaken", "{json}");
    assert_eq!(json["token"], 31, "{json}");
    assert_eq!(json["highest"], 32, "{json}");
    assert_eq!(json["resource"], "/k", "{json}");
    assert_eq!(r31.header("x-fencing-highest"), Some("32"));
    assert!(!seen(&backend, 32), "32 went while 30 was in flight");
    backend.release("h30");
    assert_eq!(t30.join().unwrap().status, 200);
    assert_eq!(t32.join().unwrap().status, 200);
    let tokens: Vec<_> = backend.records().iter().map(|r| r.token_u64()).collect();
    assert_eq!(tokens, [Some(30), Some(32)]);
}

#[test]
fn equal_tokens_are_in_flight_together() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let a = put_async(&gw, "/eq", 40, &[("X-Test-Hold", "a")]);
    assert!(backend.wait_for(HANG_GUARD, |r| r.len() == 1));
    let b = put_async(&gw, "/eq", 40, &[("X-Test-Hold", "b")]);
    let c = std::thread::spawn({
        let addr = gw.data_addr();
        move || http(addr, "GET", "/eq", &[("X-Fencing-Token", "40")], b"")
    });
    let together = backend.wait_for(HANG_GUARD, |r| r.len() == 3);
    backend.release("a");
    backend.release("b");
    assert!(
        together,
        "a second request with the same token did not go while the first was in flight: {:#?}",
        backend.records()
    );
    assert_eq!(a.join().unwrap().status, 200);
    assert_eq!(b.join().unwrap().status, 200);
    assert_eq!(c.join().unwrap().status, 200);
}

#[test]
fn other_keys_do_not_wait() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let held = put_async(&gw, "/a", 30, &[("X-Test-Hold", "a")]);
    assert!(backend.wait_for(HANG_GUARD, |r| r.len() == 1));
    // A higher token on another key is not held back by /a.
    let other = gw.put("/b", 31);
    assert_eq!(other.status, 200);
    backend.release("a");
    assert_eq!(held.join().unwrap().status, 200);
}

#[test]
fn in_flight_lasts_until_the_response_body_is_relayed() {
    // 30's response is a 32 MiB streamed body that the client does not read
    // yet: more than socket buffers hold, so the gateway is still relaying
    // it. 31 must not reach the backend until the client has read it all.
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let mut stream = std::net::TcpStream::connect(gw.data_addr()).unwrap();
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    std::io::Write::write_all(
        &mut stream,
        b"PUT /body HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nX-Fencing-Token: 30\r\n\
          X-Test-Response-Bytes: 33554432\r\n\r\n",
    )
    .unwrap();
    let mut reader = std::io::BufReader::new(stream);
    let mut status = String::new();
    std::io::BufRead::read_line(&mut reader, &mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
    let t31 = put_async(&gw, "/body", 31, &[]);
    assert!(support::wait_until(HANG_GUARD, || gw.fence("/body") == Some(31)));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !seen(&backend, 31),
        "31 reached the backend while 30's response body was still being relayed"
    );
    // Read the rest of 30's answer (headers, then the body).
    let mut rest = Vec::new();
    let mut content_length = None;
    loop {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            content_length = Some(v.trim().parse::<usize>().unwrap());
        }
        if line == "\r\n" {
            break;
        }
    }
    let want = content_length.expect("content-length relayed");
    rest.resize(want, 0);
    std::io::Read::read_exact(&mut reader, &mut rest).unwrap();
    assert_eq!(want, 33_554_432);
    let r31 = t31.join().unwrap();
    assert_eq!(r31.status, 200, "{}", r31.text());
    assert_eq!(seq_of(&backend, 31), 1);
}

#[test]
fn concurrent_burst_reaches_the_backend_in_non_decreasing_token_order_per_key() {
    let mut rng = Rng::from_env_or_clock();
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let keys = ["/burst/a", "/burst/b"];
    let mut plan = Vec::new();
    // Tokens rise over the burst with noise, so that many requests are
    // admitted and overlap (lower ones still in flight when higher ones come),
    // and some arrive stale or get overtaken.
    for i in 0..80u64 {
        let key = keys[i as usize % keys.len()];
        let token = 1 + i / 4 + rng.next() % 6;
        let delay = 5 + rng.next() % 30;
        let method = if rng.next().is_multiple_of(4) {
            "POST"
        } else {
            "PUT"
        };
        let start_after = i * 4;
        plan.push((key, token, delay, method, start_after));
    }
    let addr = gw.data_addr();
    let start = Arc::new(std::sync::Barrier::new(plan.len()));
    let threads: Vec<_> = plan
        .iter()
        .map(|&(key, token, delay, method, start_after)| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                let token_s = token.to_string();
                let delay_s = delay.to_string();
                start.wait();
                std::thread::sleep(Duration::from_millis(start_after));
                let resp = http(
                    addr,
                    method,
                    &format!("{key}?t={token}"),
                    &[("X-Fencing-Token", &token_s), ("X-Test-Delay-Ms", &delay_s)],
                    b"burst",
                );
                (key, token, resp)
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();

    let mut ok_per_key: HashMap<&str, usize> = HashMap::new();
    let mut max_ok: HashMap<&str, u64> = HashMap::new();
    for (key, token, resp) in &results {
        match resp.status {
            200 => {
                *ok_per_key.entry(key).or_default() += 1;
                let m = max_ok.entry(key).or_default();
                *m = (*m).max(*token);
            }
            409 => {
                let json = resp.assert_gateway_error(409, "stale_token");
                assert!(json["highest"].as_u64().unwrap() > *token, "{json}");
            }
            other => panic!("unexpected {other}: {}", resp.text()),
        }
    }
    let records = backend.records();
    for key in keys {
        let tokens: Vec<u64> = records
            .iter()
            .filter(|r| r.target.split('?').next() == Some(key))
            .map(|r| r.token_u64().unwrap())
            .collect();
        assert!(
            tokens.windows(2).all(|w| w[0] <= w[1]),
            "{key}: backend saw tokens out of order: {tokens:?}"
        );
        assert_eq!(
            tokens.len(),
            ok_per_key.get(key).copied().unwrap_or(0),
            "{key}: every 200 and only they reached the backend: {tokens:?}"
        );
        assert_eq!(gw.fence(key), max_ok.get(key).copied());
        // The highest token of the plan always gets through.
        let planned_max = plan.iter().filter(|p| p.0 == key).map(|p| p.1).max();
        assert_eq!(max_ok.get(key).copied(), planned_max, "{key}");
    }
    // Stronger: a request reached the backend only once no request with a
    // different (lower) token on its key was still being answered there.
    let events = backend.events();
    let key_of = |seq: usize| records[seq].target.split('?').next().unwrap().to_string();
    let mut at_backend: HashMap<usize, (String, u64)> = HashMap::new();
    for event in &events {
        match *event {
            Event::Arrived(seq) => {
                let (key, token) = (key_of(seq), records[seq].token_u64().unwrap());
                for (other, (other_key, other_token)) in &at_backend {
                    assert!(
                        *other_key != key || *other_token == token,
                        "{key}: token {token} (#{seq}) reached the backend while token \
                         {other_token} (#{other}) was still in flight there"
                    );
                }
                at_backend.insert(seq, (key, token));
            }
            Event::Responded(seq) => {
                at_backend.remove(&seq);
            }
            Event::BodyRead(_) | Event::PreconditionFailed(_) => {}
        }
    }
    let ok = results.iter().filter(|r| r.2.status == 200).count();
    eprintln!("burst: {ok} forwarded, {} refused", results.len() - ok);
    // Refused requests never reached the backend (counted above); and every
    // record's token matches the query the client put on it.
    for r in &records {
        assert_eq!(
            r.target
                .split("?t=")
                .nth(1)
                .map(|t| t.parse::<u64>().unwrap()),
            r.token_u64()
        );
    }
}

#[test]
fn client_going_away_ends_in_flight() {
    // README ("What is guaranteed"): a request counts as in flight until its response has been
    // relayed, or it failed, timed out, or the client went away. 30's client
    // hangs up while 30 is held at the backend: 31 must then go, without
    // waiting for the backend to answer 30.
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    let mut client = std::net::TcpStream::connect(gw.data_addr()).unwrap();
    std::io::Write::write_all(
        &mut client,
        b"PUT /gone HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nX-Fencing-Token: 30\r\n\
          X-Test-Hold: never\r\n\r\n",
    )
    .unwrap();
    assert!(backend.wait_for(HANG_GUARD, |r| r.len() == 1));
    drop(client);
    let t31 = put_async(&gw, "/gone", 31, &[]);
    let went = backend.wait_for(Duration::from_secs(10), |r| r.len() == 2);
    backend.release("never");
    let r31 = t31.join().unwrap();
    assert!(
        went,
        "31 waited for a request whose client had gone away (answered {} only after 30 was released)",
        r31.status
    );
    assert_eq!(r31.status, 200);
}

#[test]
fn timed_out_request_ends_in_flight() {
    let backend = Backend::start();
    let gw = GatewayProcess::start(&["--upstream", &backend.url(), "--upstream-timeout", "0.5"]);
    let t30 = put_async(&gw, "/t", 30, &[("X-Test-Hang", "1")]);
    assert!(backend.wait_for(HANG_GUARD, |r| r.len() == 1));
    let t31 = put_async(&gw, "/t", 31, &[]);
    t30.join()
        .unwrap()
        .assert_gateway_error(504, "upstream_timeout");
    assert_eq!(t31.join().unwrap().status, 200);
    let tokens: Vec<_> = backend.records().iter().map(|r| r.token_u64()).collect();
    assert_eq!(tokens, [Some(30), Some(31)]);
}
