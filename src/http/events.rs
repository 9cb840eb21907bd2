//! `GET /api/events`: server-sent events, one JSON [`EventView`] per transition.

use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt, stream};
use tokio::sync::broadcast::error::RecvError;

use super::error::ApiError;
use super::state::Api;
use crate::inspect::{EventView, TransitionTracker, format_time};
use axum::http::StatusCode;

/// How soon a disconnected `EventSource` should reconnect.
const RECONNECT: Duration = Duration::from_secs(1);

pub(crate) async fn stream(
    State(api): State<Api>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let Some(slot) = api.open_event_stream() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            "too many event streams are open; retry later",
        ));
    };
    let manager = api.manager().clone();
    // Subscribe before reading the holders: nothing falls between the two.
    let events = manager.events();
    let tracker = TransitionTracker::new(&manager.holders());
    let hello = EventView::Hello {
        instance: Some(manager.instance_id().to_string()),
        bucket: manager.bucket().to_owned(),
        at: format_time(SystemTime::now()),
    };
    let transitions = stream::unfold(
        (events, tracker, manager),
        |(mut events, mut tracker, manager)| async move {
            loop {
                match events.recv().await {
                    Ok(event) => {
                        if let Some(view) = tracker.event(&event, manager.instance_id()) {
                            return Some((view, (events, tracker, manager)));
                        }
                    }
                    Err(RecvError::Lagged(missed)) => {
                        // Start over from the current holders; the client re-reads the list.
                        tracker = TransitionTracker::new(&manager.holders());
                        let view = EventView::Resync {
                            missed,
                            at: format_time(SystemTime::now()),
                        };
                        return Some((view, (events, tracker, manager)));
                    }
                    Err(RecvError::Closed) => return None,
                }
            }
        },
    );
    let first = sse_event(&hello).retry(RECONNECT);
    let body = stream::once(async move { first })
        .chain(transitions.map(|view| sse_event(&view)))
        // The slot is freed when the stream is dropped.
        .map(move |event| {
            let _counted = &slot;
            Ok(event)
        })
        // An open stream must not keep graceful shutdown waiting.
        .take_until(api.shutdown_token().cancelled_owned());
    Ok(Sse::new(body).keep_alive(KeepAlive::new().interval(api.options().keep_alive)))
}

fn sse_event(view: &EventView) -> Event {
    Event::default()
        .json_data(view)
        .unwrap_or_else(|_| Event::default().comment("unserialisable event"))
}
