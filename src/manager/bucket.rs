//! Opening (or creating) the bucket and reading its epoch and TTL support.

use std::time::Duration;

use async_nats::jetstream::{self, ErrorCode, kv};

use crate::codec::jetstream_code;
use crate::core::BucketSettings;
use crate::error::Error;
use crate::store::{LeaseStore, ServerErrors, TtlMode};

/// How long expiry and delete markers stay in the bucket.
const MARKER_TTL: Duration = Duration::from_secs(60);

pub(crate) struct Opened {
    pub(crate) js: jetstream::Context,
    pub(crate) store: LeaseStore,
    pub(crate) kv: kv::Store,
    pub(crate) epoch: u64,
    /// When the bucket was created, on this process's monotonic clock (protocol Q6: no
    /// acquire in a young bucket).
    pub(crate) born: tokio::time::Instant,
    /// The stream's last sequence when it was opened: every revision written later is larger.
    pub(crate) last_revision: u64,
}

/// The JetStream API subjects [`open`] publishes to: a permission violation on one of them
/// means the bucket cannot be opened however often it is retried.
pub(crate) fn api_subjects(config: &BucketSettings) -> Vec<String> {
    let api = config.jetstream_api_prefix();
    let mut subjects = vec![format!("{api}.STREAM.INFO.KV_{}", config.name)];
    if config.auto_create {
        subjects.push(format!("{api}.INFO"));
        subjects.push(format!("{api}.STREAM.CREATE.KV_{}", config.name));
    }
    subjects
}

/// Opens the bucket; creates it when it is missing and `auto_create` is set (P1). One attempt:
/// the caller retries what can heal and watches for permission violations on
/// [`api_subjects`].
pub(crate) async fn open(
    client: &async_nats::Client,
    config: &BucketSettings,
    errors: &ServerErrors,
) -> Result<Opened, Error> {
    let api = config.jetstream_api_prefix();
    let js = jetstream::with_prefix(client.clone(), &api);
    let kv = match js.get_key_value(&config.name).await {
        Ok(kv) => kv,
        Err(err) if jetstream_code(&err) == Some(ErrorCode::STREAM_NOT_FOUND) => {
            if !config.auto_create {
                return Err(Error::BucketNotFound {
                    bucket: config.name.clone(),
                });
            }
            create(&js, config).await?
        }
        Err(err) => return Err(classify(err, errors, &config.name)),
    };
    let status = kv
        .status()
        .await
        .map_err(|e| Error::JetStream(Box::new(e)))?;
    let info = &status.info;
    let ttl_mode = if info.config.allow_message_ttl {
        TtlMode::PerKey
    } else if !info.config.max_age.is_zero() {
        TtlMode::BucketMaxAge
    } else {
        TtlMode::None
    };
    if ttl_mode != TtlMode::PerKey {
        tracing::warn!(
            bucket = %config.name,
            ?ttl_mode,
            "bucket has no per-key TTLs (needs nats-server >= 2.11 and limit markers); crash \
             fail-over relies on the bucket max_age or the followers' observed-expiry backstop"
        );
    }
    let epoch = u64::try_from(info.created.unix_timestamp_nanos()).unwrap_or(0);
    let born = born(&js, &config.name).await;
    let stream = js
        .get_stream(format!("KV_{}", config.name))
        .await
        .map_err(|e| Error::JetStream(Box::new(e)))?;
    let store = LeaseStore::new(
        js.clone(),
        &api,
        stream,
        config.name.clone(),
        ttl_mode,
        info.config.max_age,
        errors.clone(),
    );
    Ok(Opened {
        js,
        store,
        kv,
        epoch,
        born,
        last_revision: info.state.last_sequence,
    })
}

/// When bucket `name` was created, on this process's monotonic clock: the instant a
/// stream-info answer arrived minus `ts − created` of that answer (the server's time when it
/// answered and the stream's creation time, both on the server's clock). The server's clock
/// read `ts` before the answer arrived, so the bucket is at least that old at that instant:
/// a hold counted from the result never ends early (protocol Q6). Without the server's time
/// (an answer without `ts`, a failed request) the bucket is taken as created just now.
pub(crate) async fn born(js: &jetstream::Context, name: &str) -> tokio::time::Instant {
    #[derive(serde::Deserialize)]
    struct Clock {
        created: String,
        #[serde(default)]
        ts: Option<String>,
    }
    let parse = |s: &str| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
    };
    let answer: Result<jetstream::response::Response<Clock>, _> = js
        .request(format!("STREAM.INFO.KV_{name}"), &serde_json::json!({}))
        .await;
    let received = tokio::time::Instant::now();
    let age = match answer {
        Ok(jetstream::response::Response::Ok(Clock {
            created,
            ts: Some(ts),
        })) => match (parse(&created), parse(&ts)) {
            (Some(created), Some(ts)) => {
                Some(Duration::try_from(ts - created).unwrap_or(Duration::ZERO))
            }
            _ => None,
        },
        Ok(_) | Err(_) => None,
    };
    let Some(age) = age else {
        tracing::debug!(
            bucket = name,
            "the server did not say its time: bucket taken as new"
        );
        return received;
    };
    received.checked_sub(age).unwrap_or_else(|| {
        // Older than this process's clock reaches back: old enough for any hold.
        received
            .checked_sub(crate::core::Timing::MAX_TTL * 2)
            .unwrap_or(received)
    })
}

pub(crate) async fn create(
    js: &jetstream::Context,
    config: &BucketSettings,
) -> Result<kv::Store, Error> {
    let created = js
        .create_key_value(kv::Config {
            bucket: config.name.clone(),
            description: "nats-roles leases".to_string(),
            history: 1,
            num_replicas: config.replicas,
            limit_markers: Some(MARKER_TTL),
            ..Default::default()
        })
        .await;
    match created {
        Ok(kv) => {
            tracing::info!(bucket = %config.name, replicas = config.replicas, "created bucket");
            Ok(kv)
        }
        // Another instance may have created it first; otherwise report why creation failed
        // (e.g. permissions, replicas > cluster size), not the missing stream.
        Err(create_err) => match js.get_key_value(&config.name).await {
            Ok(kv) => Ok(kv),
            Err(_) => Err(Error::JetStream(Box::new(create_err))),
        },
    }
}

fn classify(err: jetstream::context::KeyValueError, _errors: &ServerErrors, bucket: &str) -> Error {
    match jetstream_code(&err) {
        Some(ErrorCode::STREAM_NOT_FOUND) => Error::BucketNotFound {
            bucket: bucket.to_string(),
        },
        _ => Error::JetStream(Box::new(err)),
    }
}
