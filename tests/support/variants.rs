//! One check, run in each way the gateway can be deployed around it: one
//! gateway; two instances sharing fences on one etcd prefix (the fences
//! raised through the first, the stale client at the second); one with
//! `--conditional-writes` where the store checks versions. The same
//! requests must give the same answers in each.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::{EtcdCluster, GatewayProcess};

/// How the gateways of a check are deployed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// One gateway, its default state.
    Single,
    /// Two gateways on one etcd prefix (`--state etcd`).
    TwoOnEtcd,
    /// One gateway with `--conditional-writes DIALECT`.
    Conditional(&'static str),
}

/// The gateways of one check.
pub struct Gateways {
    /// The one the current holders write through.
    pub writer: GatewayProcess,
    other: Option<GatewayProcess>,
}

impl Gateways {
    /// Gateways of `variant` with `args`.
    pub fn start(variant: Variant, args: &[&str]) -> Gateways {
        match variant {
            Variant::Single => Gateways {
                writer: GatewayProcess::start(args),
                other: None,
            },
            Variant::Conditional(dialect) => {
                let mut all = args.to_vec();
                all.extend(["--conditional-writes", dialect]);
                Gateways {
                    writer: GatewayProcess::start(&all),
                    other: None,
                }
            }
            Variant::TwoOnEtcd => {
                static PREFIXES: AtomicUsize = AtomicUsize::new(0);
                let prefix = format!(
                    "/variants-{}-{}/",
                    std::process::id(),
                    PREFIXES.fetch_add(1, Ordering::Relaxed)
                );
                let endpoints = cluster().endpoints();
                let mut all = args.to_vec();
                all.extend([
                    "--state",
                    "etcd",
                    "--etcd-endpoints",
                    endpoints.as_str(),
                    "--etcd-prefix",
                    prefix.as_str(),
                ]);
                Gateways {
                    writer: GatewayProcess::start(&all),
                    other: Some(GatewayProcess::start(&all)),
                }
            }
        }
    }

    /// The one a stale client sends through: the second instance where
    /// there are two.
    pub fn stale(&self) -> &GatewayProcess {
        self.other.as_ref().unwrap_or(&self.writer)
    }
}

/// One etcd member for the test binary's `TwoOnEtcd` checks.
fn cluster() -> &'static EtcdCluster {
    static CLUSTER: OnceLock<EtcdCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| EtcdCluster::start(1))
}
