//! The demos' harness (`mod support;` in each example), one job a module:
//!
//! - [`timeline`]: what every actor did, drawn as an ASCII sequence diagram.
//! - [`client`]: a tiny HTTP client whose requests go on the timeline.
//! - [`storage`]: fencegate's embedded object store with a tap, and a real
//!   fencegate in this process in front of it.
//! - [`verdict`]: each run shown and judged, and the verdict line.
//! - [`lease_lock`]: the in-process demos' lease lock and client threads.
//! - [`process`]: real server and worker processes (SIGSTOP/SIGCONT, cleanup
//!   on drop and on Ctrl-C).
//! - [`port`]: free loopback ports for servers told their port.
//! - [`worker`]: a worker process's arguments and reports.
//! - [`lock_demo`]: the lock-provider demos' scenario, played by worker
//!   processes against a real lock service; [`redis`], [`etcd`],
//!   [`zookeeper`], [`postgres`]: the services.

// Each example uses a part of the harness.
#![allow(dead_code)]

pub mod client;
pub mod etcd;
pub mod lease_lock;
pub mod lock_demo;
pub mod port;
pub mod postgres;
pub mod process;
pub mod redis;
pub mod storage;
pub mod timeline;
pub mod verdict;
pub mod worker;
pub mod zookeeper;

// What the examples use most, at the top; each uses only some of it.
#[allow(unused_imports)]
pub use {
    client::{call, http, request_label, Reply, Route},
    lease_lock::{
        freeze, spawn_client, spawn_process, two_clients, LeaseLock, CLIENT_2_START, LEASE,
    },
    storage::{end_run, fence_path, run_timeline, shown, start_backend, start_gateway, Storage},
    timeline::{Lane, Timeline},
    verdict::{
        direct_then_fenced, heading, judge_two_clients, show_run, verdict, TwoClients,
        TwoClientsText,
    },
};

/// Any error, with a message fit for one line.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// A result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The header carrying the token (fencegate's default).
pub const TOKEN_HEADER: &str = "x-fencing-token";
