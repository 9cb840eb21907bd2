//! Opening (or creating) the bucket and reading its epoch and TTL support.

use std::time::Duration;

use async_nats::jetstream::{self, ErrorCode, kv};

use crate::core::BucketSettings;
use crate::error::Error;
use crate::store::{LeaseStore, ServerErrors, TtlMode, jetstream_code};

/// How long expiry and delete markers stay in the bucket.
const MARKER_TTL: Duration = Duration::from_secs(60);

pub(crate) struct Opened {
    pub(crate) js: jetstream::Context,
    pub(crate) store: LeaseStore,
    pub(crate) kv: kv::Store,
    pub(crate) epoch: u64,
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
        last_revision: info.state.last_sequence,
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
