//! The relay's answers read: a success's body, an error body as a [`ToolError`] (its code from
//! the closed table, the call id when the relay named one), a transport failure, and which
//! failures are worth another attempt.

use relay_wire::{ErrorBody, ErrorCode, ToolCallResponse};

use super::{CallOk, Code, ToolError};

/// A transport failure or a draining relay is worth another attempt (same Idempotency-Key, so
/// the relay replays rather than re-emits). Anything the relay decided is final.
pub(super) fn retryable(err: &ToolError) -> bool {
    err.status.is_none() && err.code == Code::RelayUnreachable
        || err.is(ErrorCode::ShuttingDown)
        || err.is(ErrorCode::Unavailable)
}

pub(super) fn transport_error(err: &reqwest::Error) -> ToolError {
    let what = if err.is_timeout() {
        "the relay did not answer in time"
    } else if err.is_connect() {
        "could not connect to the relay"
    } else {
        "the connection to the relay failed"
    };
    ToolError::new(Code::RelayUnreachable, what)
}

pub(super) async fn read_call(response: reqwest::Response) -> Result<CallOk, ToolError> {
    let ok: ToolCallResponse = read_json(response).await?;
    Ok(CallOk {
        call_id: ok.call_id,
        result: ok.result,
    })
}

pub(super) async fn read_json<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
) -> Result<T, ToolError> {
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(|e| ToolError {
        status: Some(status),
        ..transport_error(&e)
    })?;
    if (200..300).contains(&status) {
        return serde_json::from_slice(&bytes).map_err(|_| ToolError {
            status: Some(status),
            ..ToolError::new(Code::BadResponse, "the relay's answer could not be read")
        });
    }
    match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(body) => Err(match Code::parse(&body.error.code) {
            Some(code) => ToolError {
                code,
                message: body.error.message,
                status: Some(status),
                call_id: body.call_id,
            },
            // A code outside the table (a newer relay): said as it came, under bad_response.
            None => ToolError {
                status: Some(status),
                call_id: body.call_id,
                ..ToolError::new(
                    Code::BadResponse,
                    format!("{}: {}", body.error.code, body.error.message),
                )
            },
        }),
        Err(_) => Err(ToolError {
            status: Some(status),
            ..ToolError::new(
                if status == 503 {
                    Code::Relay(ErrorCode::ShuttingDown)
                } else {
                    Code::BadResponse
                },
                format!("the relay answered {status} without an error body"),
            )
        }),
    }
}
