//! Protocol Q8 (issue 27) from outside: real `nats-roles run` processes on one server, seen
//! through the server's own consumer list and the bucket. Each instance's sessions are followed
//! by its successors only; a holder killed together with all its successors is still found
//! (the second tier); a member record another client deletes makes nobody take a live
//! holder's roles.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream;
use futures_util::TryStreamExt;
use nats_roles::InstanceId;
use nats_roles::tooling::presence::{SUCCESSORS, follow_order};
use testkit::instances::Deployment;
use testkit::process::{SIGKILL, signal};
use testkit::server::NatsServer;
use tokio::time::Instant;

const IDS: [&str; 7] = ["s0", "s1", "s2", "s3", "s4", "s5", "s6"];
const ROLES: [&str; 6] = ["r0", "r1", "r2", "r3", "r4", "r5"];
const TIMING: &str = "timing:\n  ttl: 2s\n  heartbeat: 500ms\n";

struct Fleet {
    _server: NatsServer,
    d: Deployment,
    kv: jetstream::kv::Store,
    js: jetstream::Context,
}

async fn fleet(bucket: &str) -> Fleet {
    let server = NatsServer::start().await;
    let mut d = Deployment::new(&server.url(), bucket, &ROLES, TIMING);
    for id in IDS {
        d.start(id).await;
    }
    let js = jetstream::new(testkit::client::connect(&server.url()).await);
    let kv = js.get_key_value(bucket).await.expect("the bucket");
    let f = Fleet {
        _server: server,
        d,
        kv,
        js,
    };
    f.wait(
        "every role held and every member record listing a session",
        |f| {
            Box::pin(async move {
                f.holders().await.len() == ROLES.len() && f.listed().await.len() == IDS.len()
            })
        },
    )
    .await;
    f
}

impl Fleet {
    /// Role → holder, for the roles held now.
    async fn holders(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for role in ROLES {
            if let Ok(Some(v)) = self.kv.get(format!("role.{role}")).await
                && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&v)
                && let Some(h) = v["holder"].as_str()
            {
                out.insert(role.to_owned(), h.to_owned());
            }
        }
        out
    }

    /// The instances whose member record lists at least one session.
    async fn listed(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for id in IDS {
            if let Ok(Some(v)) = self.kv.get(format!("member.{id}")).await
                && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&v)
                && v["sessions"].as_object().is_some_and(|s| !s.is_empty())
            {
                out.insert(id.to_owned());
            }
        }
        out
    }

    /// Bound consumers on each instance's session keys: instance → count.
    async fn followers(&self) -> BTreeMap<String, usize> {
        let stream = self
            .js
            .get_stream(format!("KV_{}", self.d.bucket))
            .await
            .expect("the stream");
        let infos: Vec<_> = stream
            .consumers()
            .try_collect()
            .await
            .expect("the consumer list");
        let prefix = format!("$KV.{}.session.", self.d.bucket);
        let mut out = BTreeMap::new();
        for info in infos.iter().filter(|i| i.push_bound) {
            let mut filters = info.config.filter_subjects.clone();
            filters.push(info.config.filter_subject.clone());
            for f in filters {
                if let Some(id) = f.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".>")) {
                    *out.entry(id.to_owned()).or_insert(0) += 1;
                }
            }
        }
        out
    }

    async fn wait(
        &self,
        what: &str,
        done: impl for<'a> Fn(&'a Fleet) -> futures_util::future::BoxFuture<'a, bool>,
    ) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done(self).await {
            assert!(
                Instant::now() < deadline,
                "not reached within 30 s: {what}\nholders {:?}\nfollowers {:?}\n{}",
                self.holders().await,
                self.followers().await,
                self.d.report()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn index(&self, id: &str) -> usize {
        IDS.iter()
            .position(|i| *i == id)
            .expect("an id of the fleet")
    }
}

fn ids() -> Vec<InstanceId> {
    IDS.iter()
        .map(|i| InstanceId::new(*i).expect("valid"))
        .collect()
}

/// At rest every instance's session keys have exactly `SUCCESSORS + 1` consumers: its own and
/// its successors' (before Q8 every instance watched every session: 7 × 7).
#[tokio::test]
async fn each_instance_s_sessions_are_followed_by_itself_and_its_successors_only() {
    let f = fleet("q8-rest").await;
    let want: BTreeMap<String, usize> = IDS
        .iter()
        .map(|i| ((*i).to_owned(), SUCCESSORS + 1))
        .collect();
    // The orphan grace and a few heartbeats.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = f.followers().await;
        if got == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "session consumers per instance: {got:?}, want {want:?}\n{}",
            f.d.report()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A holder killed together with all its successors: nobody follows its sessions any more.
/// The members after them find its end — the successors of the dead successors delete their
/// records, which moves the survivors up in the holder's ranking (they follow it from its
/// keys' last entries: the expiry marker), or the second tier reads its keys once per
/// backstop period — delete its record, and every candidate follows it as an orphan and
/// takes its roles. Without either the roles would wait for the presence TTL (30 s); here
/// (TTL 2 s) they were re-held 2.07–2.29 s after the kill.
#[tokio::test]
async fn a_holder_killed_with_all_its_successors_is_still_found() {
    let mut f = fleet("q8-tier2").await;
    let holders = f.holders().await;
    let h = holders["r0"].clone();
    let order = follow_order(&InstanceId::new(&h).expect("valid"), &ids());
    let dead: Vec<String> = std::iter::once(h.clone())
        .chain(order.iter().take(SUCCESSORS).map(ToString::to_string))
        .collect();
    let lost: Vec<&str> = holders
        .iter()
        .filter(|(_, holder)| dead.contains(holder))
        .map(|(r, _)| r.as_str())
        .collect();
    let killed = Instant::now();
    for id in &dead {
        signal(f.d.instances[f.index(id)].pid(), SIGKILL);
    }
    for id in &dead {
        let i = f.index(id);
        f.d.wait_exit(i, Duration::from_secs(5)).await;
    }
    f.wait("every role held by a survivor", |f| {
        let dead = dead.clone();
        Box::pin(async move {
            let h = f.holders().await;
            h.len() == ROLES.len() && h.values().all(|x| !dead.contains(x))
        })
    })
    .await;
    let took = killed.elapsed();
    // TTL 2 s, a backstop period of 3 s, the first read spread over one more, and the
    // takeover: well under the 30 s presence TTL.
    assert!(
        took < Duration::from_secs(15),
        "roles {lost:?} of {h} re-held {took:?} after {dead:?} were killed\n{}",
        f.d.report()
    );
    f.wait("the dead members' records deleted", |f| {
        let dead = dead.clone();
        Box::pin(async move { f.listed().await.iter().all(|i| !dead.contains(i)) })
    })
    .await;
    eprintln!("roles {lost:?} of {h} re-held {took:?} after {dead:?} were killed");
    if std::env::var_os("Q8_DEBUG").is_some() {
        eprintln!("{}", f.d.report());
    }
}

/// Another client deletes a live holder's member record: every instance now follows the holder
/// (an orphan), sees its session live, and nobody takes its roles; the holder writes its
/// record again after its next renewal and the followers go back to its successors.
#[tokio::test]
async fn a_member_record_deleted_by_another_client_takes_no_role_from_a_live_holder() {
    let f = fleet("q8-hostile").await;
    let before = f.holders().await;
    let h = before["r0"].clone();
    f.kv.delete(format!("member.{h}"))
        .await
        .expect("foreign delete");
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        assert_eq!(
            f.holders().await,
            before,
            "a role moved after another client deleted member.{h}\n{}",
            f.d.report()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    f.wait("the holder's record written again", |f| {
        let h = h.clone();
        Box::pin(async move { f.listed().await.contains(&h) })
    })
    .await;
    let want: BTreeMap<String, usize> = IDS
        .iter()
        .map(|i| ((*i).to_owned(), SUCCESSORS + 1))
        .collect();
    f.wait("followers back to the successors", |f| {
        let want = want.clone();
        Box::pin(async move { f.followers().await == want })
    })
    .await;
}
