//! `GET /api/events`: server-sent events, one JSON [`EventView`] per transition, numbered by
//! the [`EventJournal`]; with `?since=N`, the journal's events after `N` as one JSON
//! [`EventPage`].

use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt, stream};

use super::error::ApiError;
use super::journal::{EventJournal, EventPage, JournalEntry};
use super::state::Api;
use crate::inspect::{EventView, format_time};

/// How soon a disconnected `EventSource` should reconnect.
const RECONNECT: Duration = Duration::from_secs(1);
/// Longest cursor accepted, in digits (`u64::MAX` has 20).
const MAX_CURSOR_DIGITS: usize = 20;

/// `GET /api/events[?since=N]`.
pub(crate) async fn get(
    State(api): State<Api>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let mut since = query.iter().filter(|(k, _)| k == "since").map(|(_, v)| v);
    match (since.next(), since.next()) {
        (None, _) => stream(&api, &headers).map(IntoResponse::into_response),
        (Some(_), Some(_)) => Err(bad_cursor("give `since` once")),
        (Some(raw), None) => page(&api, parse_cursor(raw)?).map(IntoResponse::into_response),
    }
}

fn bad_cursor(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_cursor", message)
}

/// A cursor: decimal digits only (no sign, no spaces), at most `u64::MAX`.
fn parse_cursor(raw: &str) -> Result<u64, ApiError> {
    let shown: String = raw.chars().take(24).collect();
    if raw.is_empty() || raw.len() > MAX_CURSOR_DIGITS || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad_cursor(format!(
            "since={shown:?} is not a cursor: give the `seq` of an event or the `cursor` of \
             an answer (a whole number from 0); 0 lists every event kept"
        )));
    }
    raw.parse::<u64>().map_err(|_| {
        bad_cursor(format!(
            "since={shown:?} is not a cursor: it is larger than any sequence number"
        ))
    })
}

/// The journal's events after `since`.
fn page(api: &Api, since: u64) -> Result<Json<EventPage>, ApiError> {
    let journal = api.journal();
    let after = journal.after(since).map_err(|ahead| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "cursor_ahead",
            format!(
                "since={since} is ahead of this instance's newest event ({}): the cursor comes \
                 from another process (a restart starts again at 1); start over with since=0",
                ahead.latest
            ),
        )
    })?;
    let manager = api.manager();
    Ok(Json(EventPage {
        instance: manager.instance_id().to_string(),
        bucket: manager.bucket().to_owned(),
        since,
        events: after.events,
        cursor: after.cursor,
        oldest: after.oldest,
        truncated: after.missed > 0,
        capacity: journal.capacity(),
    }))
}

/// The live stream: a `hello`, then the journal's events as they are recorded (each with its
/// `seq` as the SSE `id`, so a reconnecting `EventSource` resumes after the last one it got:
/// `Last-Event-ID`).
fn stream(
    api: &Api,
    headers: &HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>> + use<>>, ApiError> {
    let Some(slot) = api.open_event_stream() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            "too many event streams are open; retry later",
        ));
    };
    let journal = api.journal().clone();
    // Subscribe before reading the cursor: nothing falls between the two.
    let wake = journal.subscribe();
    let latest = journal.latest();
    let cursor = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_cursor(v.trim()).ok())
        .filter(|&c| c <= latest)
        .unwrap_or(latest);
    let manager = api.manager();
    let hello = EventView::Hello {
        instance: Some(manager.instance_id().to_string()),
        bucket: manager.bucket().to_owned(),
        cursor: Some(cursor),
        admin: Some(api.options().admin_token.is_some()),
        at: format_time(SystemTime::now()),
    };
    let first = sse_event(&hello).id(cursor.to_string()).retry(RECONNECT);
    let events = stream::unfold(
        (journal, wake, cursor, Vec::<Event>::new()),
        |(journal, mut wake, mut cursor, mut pending)| async move {
            loop {
                if let Some(event) = pending.pop() {
                    return Some((event, (journal, wake, cursor, pending)));
                }
                let (found, next) = read_after(&journal, cursor);
                cursor = next;
                // Popped from the end: store newest first.
                pending = found.into_iter().rev().collect();
                if pending.is_empty() && wake.changed().await.is_err() {
                    return None;
                }
            }
        },
    );
    let body = stream::once(async move { first })
        .chain(events)
        // The slot is freed when the stream is dropped.
        .map(move |event| {
            let _counted = &slot;
            Ok(event)
        })
        // An open stream must not keep graceful shutdown waiting.
        .take_until(api.shutdown_token().cancelled_owned());
    Ok(Sse::new(body).keep_alive(KeepAlive::new().interval(api.options().keep_alive)))
}

/// The SSE events of the journal after `cursor` (a `resync` first when some were dropped
/// already: the reader was too slow) and the new cursor.
fn read_after(journal: &EventJournal, cursor: u64) -> (Vec<Event>, u64) {
    match journal.after(cursor) {
        Ok(after) => {
            let mut out = Vec::with_capacity(after.events.len() + 1);
            if after.missed > 0 {
                out.push(sse_event(&EventView::Resync {
                    missed: after.missed,
                    at: format_time(SystemTime::now()),
                }));
            }
            out.extend(after.events.iter().map(sse_entry));
            (out, after.cursor)
        }
        // Cannot happen (cursors come from the journal); start again from its newest.
        Err(ahead) => (Vec::new(), ahead.latest),
    }
}

fn sse_entry(entry: &JournalEntry) -> Event {
    Event::default()
        .id(entry.seq.to_string())
        .json_data(entry)
        .unwrap_or_else(|_| Event::default().comment("unserialisable event"))
}

fn sse_event(view: &EventView) -> Event {
    Event::default()
        .json_data(view)
        .unwrap_or_else(|_| Event::default().comment("unserialisable event"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_plain_whole_numbers() {
        for ok in ["0", "7", "007", "18446744073709551615"] {
            assert!(parse_cursor(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1.0",
            "1e3",
            "0x10",
            "abc",
            "18446744073709551616",
            "99999999999999999999999999999",
            "١٢",
        ] {
            let e = parse_cursor(bad).expect_err(bad);
            assert_eq!(
                (e.status, e.code),
                (StatusCode::BAD_REQUEST, "bad_cursor"),
                "{bad}"
            );
        }
    }
}
