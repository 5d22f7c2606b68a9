//! Token trust on the real binary, against real lock services (Redis, etcd,
//! PostgreSQL, ZooKeeper, started by the demos' harness): a token above the
//! issuer's bound is refused 403 and raises nothing, a real one is admitted,
//! a stale one is refused without asking, a stopped issuer is 503 with
//! nothing forwarded, and many concurrent raises cost one question.

#[path = "../support/mod.rs"]
mod support;

#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../examples/support/mod.rs"]
mod demo;

use std::net::SocketAddr;

use support::{metric, outcome, Backend, GatewayProcess};

fn gateway(backend: &Backend, issuer: &str) -> GatewayProcess {
    GatewayProcess::in_front_of(backend, &["--token-issuer", issuer])
}

fn questions(gw: &GatewayProcess) -> f64 {
    metric(&gw.metrics(), "fencegate_issuer_questions_total").unwrap_or(0.0)
}

/// What every issuer must do, given tokens the issuer did and did not hand
/// out, and a way to stop it.
fn check_issuer(
    gw: &GatewayProcess,
    backend: &Backend,
    issued: u64,
    forged: u64,
    stop: impl FnOnce(),
) {
    let refused = gw.put("/a", forged);
    let err = refused.assert_gateway_error(403, "token_not_issued");
    assert_eq!(err["resource"], "/a");
    assert_eq!(err["token"], forged);
    let bound = err["issued"].as_u64().unwrap();
    assert!(bound >= issued && bound < forged, "issued {bound}");
    assert_eq!(gw.fence("/a"), None, "a refused token raises nothing");
    assert_eq!(backend.count(), 0);

    assert_eq!(gw.put("/a", issued).status, 200);
    assert_eq!(gw.fence("/a"), Some(issued));
    // At or below the highest: never asked (a stale token is 409 as always).
    let asked = questions(gw);
    assert_eq!(gw.put("/a", issued).status, 200);
    gw.put("/a", issued - 1)
        .assert_gateway_error(409, "stale_token");
    assert_eq!(questions(gw), asked);

    stop();
    let unavailable = gw.put("/a", forged);
    let err = unavailable.assert_gateway_error(503, "token_issuer_unavailable");
    assert!(err["detail"].is_string());
    // Below the confirmed bound needs no question, so it still goes through.
    assert_eq!(gw.put("/b", issued).status, 200);
    assert_eq!(backend.count(), 3);
    assert_eq!(gw.fence("/a"), Some(issued));
    let text = gw.metrics();
    assert_eq!(outcome(&text, "token_not_issued"), 1.0);
    assert_eq!(outcome(&text, "token_issuer_unavailable"), 1.0);
}

/// A Redis server and a way to set its counters, as a lock service would.
fn redis_with_setter() -> (demo::redis::Redis<1>, impl FnMut(&str, u64)) {
    use demo::lock_demo::Service;
    let redis = runtime()
        .block_on(demo::redis::Redis::<1>::start())
        .unwrap();
    let mut con = redis::Client::open(format!("redis://{}", redis.addrs()))
        .unwrap()
        .get_connection()
        .unwrap();
    let set = move |key: &str, value: u64| {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(&mut con)
            .unwrap();
    };
    (redis, set)
}

#[test]
fn redis_counter() {
    let (redis, mut set) = redis_with_setter();
    set("grants", 40);
    let backend = Backend::start();
    let gw = gateway(&backend, &format!("redis://{}/grants", redis.addrs()));
    check_issuer(&gw, &backend, 40, 41, move || drop(redis));
}

#[test]
fn redis_counter_per_lock_and_merged_questions() {
    let (redis, mut set) = redis_with_setter();
    let backend = Backend::start();
    let gw = gateway(
        &backend,
        &format!("redis://{}/lock:%7Bkey%7D", redis.addrs()),
    );
    set("lock:/p/1", 7);
    assert_eq!(gw.put("/p/1", 7).status, 200);
    // Another lock's counter: never incremented, nothing issued.
    gw.put("/p/2", 7)
        .assert_gateway_error(403, "token_not_issued");

    // Many raises at once on one lock: one question answers them all.
    set("lock:/p/3", 1000);
    let before = questions(&gw);
    let data = gw.data_addr();
    let writers: Vec<_> = (0..40u64)
        .map(|i| {
            std::thread::spawn(move || {
                let token = (900 + i).to_string();
                support::http(data, "PUT", "/p/3", &[("X-Fencing-Token", &token)], b"x").status
            })
        })
        .collect();
    let statuses: Vec<u16> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    // Admitted or overtaken by a higher one; never refused by the issuer.
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 409),
        "{statuses:?}"
    );
    assert!(statuses.contains(&200));
    assert_eq!(questions(&gw) - before, 1.0, "one question for 40 raises");
    let text = gw.metrics();
    assert_eq!(outcome(&text, "token_not_issued"), 1.0);
}

/// A runtime for the demo harness's async server starts and clients (the
/// test backend runs its own).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn etcd_revision() {
    let rt = runtime();
    let etcd = rt.block_on(demo::etcd::Etcd::start()).unwrap();
    let addr: SocketAddr = etcd.addr;
    // A lock key's create revision is a token: put one and read it back.
    let put = rt
        .block_on(demo::etcd::call(
            addr,
            "/v3/kv/put",
            serde_json::json!({ "key": demo::etcd::b64(b"lock/a"), "value": "" }),
        ))
        .unwrap();
    let revision = demo::etcd::int(&put["header"]["revision"]) as u64;
    let backend = Backend::start();
    // The first member is down: the next one answers.
    let gw = gateway(&backend, &format!("etcd://127.0.0.1:1,{addr}"));
    check_issuer(&gw, &backend, revision, revision + 1_000_000, move || {
        drop(etcd)
    });
}

#[test]
fn postgres_sequence() {
    let rt = runtime();
    let postgres = rt.block_on(demo::postgres::Postgres::start()).unwrap();
    rt.block_on(async {
        let client = demo::postgres::connect(postgres.addr).await.unwrap();
        client
            .batch_execute(
                "CREATE SEQUENCE lock_tokens; SELECT nextval('lock_tokens'); SELECT nextval('lock_tokens');",
            )
            .await
            .unwrap();
    });
    let backend = Backend::start();
    let url = format!(
        "postgres://postgres@{}/postgres?sequence=lock_tokens",
        postgres.addr
    );
    let gw = gateway(&backend, &url);
    check_issuer(&gw, &backend, 2, 3, move || drop(postgres));
}

#[test]
fn zookeeper_zxid() {
    let rt = runtime();
    let zookeeper = rt.block_on(demo::zookeeper::ZooKeeper::start()).unwrap();
    // A Curator-style lock node: its czxid is the holder's token.
    let token = rt.block_on(async {
        let client = demo::zookeeper::connect(zookeeper.addr, std::time::Duration::from_secs(10))
            .await
            .unwrap();
        let options = zookeeper_client::CreateMode::PersistentSequential
            .with_acls(zookeeper_client::Acls::anyone_all());
        let (stat, _) = client.create("/lock-", b"", &options).await.unwrap();
        stat.czxid as u64
    });
    let backend = Backend::start();
    let gw = gateway(&backend, &format!("zookeeper://{}", zookeeper.addr));
    check_issuer(&gw, &backend, token, token + 1_000_000, move || {
        drop(zookeeper)
    });
}

#[test]
fn an_unusable_issuer_url_is_a_start_error() {
    for url in [
        "ftp://127.0.0.1:1/x",
        "redis://127.0.0.1:6379",
        "postgres://u@127.0.0.1:5432/db",
        "etcd://",
        "no-scheme",
    ] {
        let run = support::run_on_free_ports(&["--token-issuer", url]);
        let line = run.start_error(url);
        assert!(line.contains("--token-issuer"), "{url}: {}", run.stderr);
    }
}
