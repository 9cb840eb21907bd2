//! The assignment API of role groups (protocol Q14) against a real nats-server: a sharded
//! worker's `GroupCallbacks` and `GroupHandle::assigned`. A member released by one instance
//! is assigned on the next only after its `on_revoke` returned (cooperative rebalancing); a
//! count lowered by the count record revokes the members above it and the watch follows; a
//! count record that is not valid changes nothing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use nats_roles::callbacks::BoxFuture;
use nats_roles::manager::{GroupCallbacks, GroupMember, GroupRevoke, GroupSpec};
use nats_roles::{RoleManager, RoleSpec};
use testkit::roles::*;
use testkit::server_and_client;
use tokio::time::Instant;

const BUCKET: &str = "groups";
/// How long a revoke takes (the work of a shard stopping).
const REVOKE: Duration = Duration::from_millis(300);

/// What happened, in order: (instance, "assign" | "revoked", index, when).
type Log = Arc<Mutex<Vec<(String, &'static str, u32, Instant)>>>;

struct Worker {
    id: String,
    log: Log,
}

impl GroupCallbacks for Worker {
    fn on_assign(&self, member: GroupMember) -> BoxFuture<'_> {
        self.log
            .lock()
            .unwrap()
            .push((self.id.clone(), "assign", member.index, Instant::now()));
        Box::pin(async {})
    }

    fn on_revoke(&self, member: GroupRevoke) -> BoxFuture<'_> {
        Box::pin(async move {
            tokio::time::sleep(REVOKE).await;
            self.log.lock().unwrap().push((
                self.id.clone(),
                "revoked",
                member.index,
                Instant::now(),
            ));
        })
    }
}

async fn start(client: &async_nats::Client, id: &str, log: &Log) -> RoleManager {
    RoleManager::builder(client.clone(), inst(id))
        .bucket(BUCKET)
        .auto_create(1)
        .drain_timeout(Duration::from_secs(2))
        .group(
            GroupSpec::new(RoleSpec::new(role("shard")).timing(fast()), 4).callbacks(Worker {
                id: id.to_owned(),
                log: log.clone(),
            }),
        )
        .start()
        .await
        .unwrap_or_else(|e| panic!("{id} starts: {e}"))
}

async fn wait_held(m: &RoleManager, want: &[u32], count: u32) {
    let handle = m.group(&role("shard")).expect("group");
    let mut rx = handle.assigned();
    let want: std::collections::BTreeSet<u32> = want.iter().copied().collect();
    let waited = tokio::time::timeout(
        Duration::from_secs(20),
        rx.wait_for(|a| a.held == want && a.count == count),
    )
    .await;
    assert!(
        waited.is_ok(),
        "{} holds {:?}, want {want:?} of {count}",
        m.instance_id(),
        handle.current()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_finishes_before_the_next_holder_is_assigned() {
    let (_server, client) = server_and_client().await;
    let log: Log = Arc::default();
    let a = start(&client, "node-a", &log).await;
    wait_held(&a, &[0, 1, 2, 3], 4).await;
    let b = start(&client, "node-b", &log).await;
    assert_eq!(
        b.group(&role("shard")).expect("group").current().held.len(),
        0
    );

    // The count record lowers the count: node-a revokes 2 and 3, the watch follows.
    a.set_group_count(&role("shard"), Some(2))
        .await
        .expect("scale");
    wait_held(&a, &[0, 1], 2).await;
    wait_held(&b, &[], 2).await;
    assert!(!b.roles().contains(&role("shard-3")), "{:?}", b.roles());

    // A count record that is not valid is ignored: the configured count (4) applies again,
    // as with no record, and members 2 and 3 are held again (by either).
    let kv = jetstream::new(client.clone())
        .get_key_value(BUCKET)
        .await
        .expect("bucket");
    kv.put(
        "control.group.shard",
        r#"{"v":1,"group":"shard","count":0}"#.into(),
    )
    .await
    .expect("put");
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let (ha, hb) = (
            a.group(&role("shard")).expect("group").current(),
            b.group(&role("shard")).expect("group").current(),
        );
        if ha.count == 4 && hb.count == 4 && ha.held.len() + hb.held.len() == 4 {
            assert!(ha.held.is_disjoint(&hb.held), "{ha:?} {hb:?}");
            break;
        }
        assert!(Instant::now() < until, "{ha:?} {hb:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.set_group_count(&role("shard"), None)
        .await
        .expect("reset");
    let held_by_a = a.group(&role("shard")).expect("group").current().held;
    assert!(!held_by_a.is_empty());

    // node-a stops: each of its members is assigned on node-b only after node-a's revoke
    // of it returned.
    a.shutdown(Duration::from_secs(10)).await.expect("shutdown");
    wait_held(&b, &[0, 1, 2, 3], 4).await;
    let log = log.lock().unwrap().clone();
    for index in held_by_a {
        let revoked = log
            .iter()
            .rfind(|(id, what, i, _)| id == "node-a" && *what == "revoked" && *i == index)
            .unwrap_or_else(|| panic!("node-a revoked {index}: {log:?}"))
            .3;
        let assigned = log
            .iter()
            .rfind(|(id, what, i, _)| id == "node-b" && *what == "assign" && *i == index)
            .unwrap_or_else(|| panic!("node-b assigned {index}: {log:?}"))
            .3;
        assert!(revoked <= assigned, "member {index}: {log:?}");
    }
    b.shutdown(Duration::from_secs(10)).await.expect("shutdown");
}

/// A bucket recreated without the count record: the group goes back to its configured count
/// (the old bucket's record is gone with it), and a record written in the new bucket is
/// followed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_bucket_forgets_the_old_count_record() {
    let (_server, client) = server_and_client().await;
    let log: Log = Arc::default();
    let a = start(&client, "node-a", &log).await;
    wait_held(&a, &[0, 1, 2, 3], 4).await;
    a.set_group_count(&role("shard"), Some(2))
        .await
        .expect("scale");
    wait_held(&a, &[0, 1], 2).await;

    let js = jetstream::new(client.clone());
    js.delete_key_value(BUCKET)
        .await
        .expect("delete the bucket");
    let kv = js
        .create_key_value(lease_bucket(BUCKET))
        .await
        .expect("recreate");
    // The young-bucket hold (Q6) delays the acquires; the count is back at once.
    wait_held(&a, &[0, 1, 2, 3], 4).await;
    kv.put(
        "control.group.shard",
        r#"{"v":1,"group":"shard","count":3,"by":"test","at":""}"#.into(),
    )
    .await
    .expect("put");
    wait_held(&a, &[0, 1, 2], 3).await;
    a.shutdown(Duration::from_secs(10)).await.expect("shutdown");
}

/// A role added at run time with a member's name (`shard-7` next to the group `shard` of 4:
/// a count record can raise the count to 8) is refused like one configured so — otherwise the
/// group's own member is refused when the count reaches it, and the caller's role is removed
/// as the group's when the count goes down again. A name that is no member (`shard-07`) is
/// accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_named_like_a_member_is_refused_at_run_time() {
    let (_server, client) = server_and_client().await;
    let log = Log::default();
    let m = start(&client, "node-a", &log).await;
    let refused = m.add_role(RoleSpec::new(role("shard-7")).timing(fast()));
    assert!(
        matches!(refused, Err(nats_roles::Error::RoleExists(ref r)) if r.as_str() == "shard-7"),
        "{refused:?}"
    );
    m.add_role(RoleSpec::new(role("shard-07")).timing(fast()))
        .expect("shard-07 is no member");
    wait_held(&m, &[0, 1, 2, 3], 4).await;
    m.shutdown(Duration::from_secs(10)).await.expect("shutdown");
}
