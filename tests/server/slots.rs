//! Roles with slots (protocol Q15) in the library against a real server: one manager with
//! every slot vacant takes exactly one (the slot permit, S7); three managers share two slots,
//! one each, and a freed slot goes to the manager without one.

use std::time::Duration;

use nats_roles::{RoleManager, RoleName};
use testkit::NatsServer;
use testkit::roles::*;

async fn slot_manager(
    client: &async_nats::Client,
    id: &str,
    bucket: &str,
    slots: u32,
) -> RoleManager {
    RoleManager::builder(client.clone(), inst(id))
        .bucket(bucket)
        .auto_create(1)
        .role(spec(&role("indexer")).slots(slots))
        .start()
        .await
        .expect("manager")
}

/// The slots this manager holds, by asking each slot role (not `slots_held`, which this
/// test checks against it).
fn held(m: &RoleManager, slots: u32) -> Vec<u32> {
    (0..slots)
        .filter(|k| m.is_leader(&RoleName::for_slot(&role("indexer"), *k).expect("slot")))
        .collect()
}

/// Watches `managers` for `period`, every 10 ms: no manager ever holds two slots.
async fn never_two(managers: &[&RoleManager], slots: u32, period: Duration) {
    let end = tokio::time::Instant::now() + period;
    while tokio::time::Instant::now() < end {
        for m in managers {
            let h = held(m, slots);
            assert!(
                h.len() <= 1,
                "{} holds slots {h:?} at once",
                m.instance_id()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One manager, three vacant slots: it takes one and only one (without the permit every slot
/// campaigns on its own and it takes all three), and `slots_held` names it; `release` of the
/// role gives its slot up for the cooldown; `remove_role` of the role removes every slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_manager_takes_one_slot_of_three() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let m = slot_manager(&client, "a", "slots-one", 3).await;
    wait_until(Duration::from_secs(10), "a slot held", || {
        !held(&m, 3).is_empty()
    })
    .await;
    never_two(&[&m], 3, TTL * 4).await;
    let h = held(&m, 3);
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(m.slots_held(&role("indexer")), h);
    assert_eq!(m.roles().len(), 3, "one role per slot: {:?}", m.roles());
    // Released by the role's name: the held slot is given up and no slot is taken during the
    // cooldown.
    m.release(&role("indexer"), Duration::from_secs(60))
        .expect("release by the role's name");
    wait_until(Duration::from_secs(10), "the slot released", || {
        held(&m, 3).is_empty()
    })
    .await;
    tokio::time::sleep(TTL).await;
    assert!(held(&m, 3).is_empty(), "a slot taken during the cooldown");
    // Removed by the role's name: every slot goes.
    m.remove_role(&role("indexer")).await.expect("removed");
    assert!(m.roles().is_empty(), "{:?}", m.roles());
    assert!(m.slots_held(&role("indexer")).is_empty());
    m.shutdown(Duration::from_secs(5)).await.expect("shutdown");
}

/// Three managers, two slots: two of them hold one slot each (distinct), never one two; the
/// shutdown of a holder frees its slot and the third manager takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_managers_share_two_slots_and_a_freed_slot_moves() {
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let a = slot_manager(&client, "a", "slots-three", 2).await;
    let b = slot_manager(&client, "b", "slots-three", 2).await;
    let c = slot_manager(&client, "c", "slots-three", 2).await;
    let all = [&a, &b, &c];
    let holders = |ms: &[&RoleManager]| -> Vec<(String, Vec<u32>)> {
        ms.iter()
            .map(|m| (m.instance_id().to_string(), held(m, 2)))
            .filter(|(_, h)| !h.is_empty())
            .collect()
    };
    wait_until(Duration::from_secs(15), "both slots held", || {
        holders(&all).len() == 2
    })
    .await;
    never_two(&all, 2, TTL * 3).await;
    let now = holders(&all);
    assert_eq!(now.len(), 2, "{now:?}");
    assert_ne!(now[0].1, now[1].1, "two managers on one slot: {now:?}");
    let leaving = all
        .iter()
        .position(|m| !held(m, 2).is_empty())
        .expect("a holder");
    let freed = held(all[leaving], 2)[0];
    let rest: Vec<&RoleManager> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leaving)
        .map(|(_, m)| *m)
        .collect();
    let idle = rest
        .iter()
        .find(|m| held(m, 2).is_empty())
        .expect("a manager without a slot")
        .instance_id()
        .clone();
    all[leaving]
        .shutdown(Duration::from_secs(5))
        .await
        .expect("shutdown");
    wait_until(Duration::from_secs(15), "the freed slot taken", || {
        rest.iter()
            .any(|m| *m.instance_id() == idle && held(m, 2) == [freed])
    })
    .await;
    never_two(&rest, 2, TTL * 2).await;
    for m in rest {
        m.shutdown(Duration::from_secs(5)).await.expect("shutdown");
    }
}

/// The negative control `slot-no-permit` (every slot campaigns on its own): one manager
/// alone takes several slots at once, and the checker flags its history S7 — while the same
/// run with the permit is clean.
#[cfg(feature = "negative-controls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slot_no_permit_control_is_flagged_s7() {
    use nats_roles::testing::NegativeControl;
    use nats_roles::tooling::history::{HistoryRecorder, Invariant, check_loaded, load_paths};
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    for (bucket, broken) in [("slots-permit", false), ("slots-no-permit", true)] {
        let path = dir.path().join(format!("{bucket}.jsonl"));
        let recorder = HistoryRecorder::create(&path, &inst("a")).expect("recorder");
        let names: Vec<RoleName> = (0..3)
            .map(|k| RoleName::for_slot(&role("indexer"), k).expect("slot"))
            .collect();
        recorder.start(&names);
        let mut b = RoleManager::builder(client.clone(), inst("a"))
            .bucket(bucket)
            .auto_create(1)
            .history(recorder.clone())
            .role(spec(&role("indexer")).slots(3));
        if broken {
            b = b.negative_control(NegativeControl::SlotNoPermit);
        }
        let m = b.start().await.expect("manager");
        wait_until(Duration::from_secs(10), "a slot held", || {
            !held(&m, 3).is_empty()
        })
        .await;
        tokio::time::sleep(TTL * 3).await;
        let most = held(&m, 3).len();
        m.shutdown(Duration::from_secs(5)).await.expect("shutdown");
        recorder.stop();
        let report = check_loaded(&load_paths(&[path]).expect("history loads"));
        if broken {
            assert!(most > 1, "slot-no-permit held only {most} slot");
            assert!(report.has(Invariant::S7), "{}", report.render_text());
        } else {
            assert_eq!(most, 1);
            assert!(report.is_clean(), "{}", report.render_text());
        }
    }
}

/// A slot whose term ended claims its role's permit until its `on_demote` returned (the
/// term's work — an `exec` child — may act until then): released with a drain shorter than
/// its `on_demote`, the slot cools down at once, and yet the other slot is taken only after
/// `on_demote` returned (without the rule, right after the release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_slot_claims_the_permit_until_its_on_demote_returned() {
    use nats_roles::FnCallbacks;
    use std::sync::{Arc, Mutex};
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    let demoted: Arc<Mutex<Option<tokio::time::Instant>>> = Arc::default();
    let callbacks = {
        let demoted = demoted.clone();
        FnCallbacks::new(
            |_l| async {},
            move |_d| {
                let demoted = demoted.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    *demoted.lock().expect("lock") = Some(tokio::time::Instant::now());
                }
            },
        )
    };
    let m = RoleManager::builder(client.clone(), inst("a"))
        .bucket("slots-demote")
        .auto_create(1)
        .drain_timeout(Duration::from_millis(200))
        .role(spec(&role("indexer")).slots(2).callbacks(callbacks))
        .start()
        .await
        .expect("manager");
    wait_until(Duration::from_secs(10), "a slot held", || {
        !held(&m, 2).is_empty()
    })
    .await;
    let k = held(&m, 2)[0];
    let slot = RoleName::for_slot(&role("indexer"), k).expect("slot");
    m.release(&slot, Duration::from_secs(30)).expect("release");
    let released = tokio::time::Instant::now();
    wait_until(Duration::from_secs(10), "the other slot held", || {
        held(&m, 2) == [1 - k]
    })
    .await;
    let again = tokio::time::Instant::now();
    let returned = (*demoted.lock().expect("lock")).unwrap_or_else(|| {
        panic!(
            "the other slot held {:?} after the release, before on_demote returned",
            again - released
        )
    });
    assert!(returned <= again);
    m.shutdown(Duration::from_secs(5)).await.expect("shutdown");
}
