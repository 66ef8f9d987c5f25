//! The OTLP/HTTP exporter: the SDK's batch processor sends from a thread of its own, and each
//! request goes out on the server's Tokio runtime through a `reqwest` client (TLS with rustls),
//! bounded by the export timeout.

use bytes::Bytes;
use http::{Request, Response};
use opentelemetry::KeyValue;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::WithHttpConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SdkTracerProvider};

use crate::Opening;
use crate::settings::Export;

/// Most of an answer read from the collector (it answers with a small status message).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Sends the exporter's requests on the server's runtime: the batch processor's thread has no
/// runtime of its own, and `reqwest` needs one.
#[derive(Debug)]
struct RuntimeClient {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let http = self.http.clone();
        let sent = self.runtime.spawn(async move {
            let answer = http.execute(request).await?;
            let status = answer.status();
            let mut body = Vec::new();
            let mut answer = answer;
            while let Some(chunk) = answer.chunk().await? {
                if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            let mut response = Response::new(Bytes::from(body));
            *response.status_mut() = status;
            Ok::<_, reqwest::Error>(response)
        });
        Ok(sent.await??)
    }
}

/// The tracer provider that batches spans and sends them to the endpoint the `OTEL_*`
/// variables name, as `service` (version `version`) unless `OTEL_SERVICE_NAME` says otherwise.
pub(crate) fn provider(
    service: &'static str,
    version: &'static str,
    export: &Export,
    opening: Opening,
    runtime: tokio::runtime::Handle,
) -> Result<SdkTracerProvider, String> {
    let http = reqwest::Client::builder()
        .timeout(export.timeout)
        .connect_timeout(export.timeout.min(std::time::Duration::from_secs(3)))
        .build()
        .map_err(|e| format!("OpenTelemetry: HTTP client: {e}"))?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(RuntimeClient { http, runtime })
        .build()
        .map_err(|e| format!("OpenTelemetry: {e}"))?;
    let mut resource = Resource::builder();
    if !export.named {
        resource = resource.with_service_name(service);
    }
    let resource = resource
        .with_attribute(KeyValue::new("service.version", version))
        .build();
    let builder = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter).build())
        .with_resource(resource);
    // A server that asks `sampled` first has decided already: the SDK keeps what it is given
    // (drawing the ratio again would keep ratio² of the traces).
    let builder = match opening {
        Opening::Always => builder,
        Opening::WhenSampled => builder.with_sampler(Sampler::AlwaysOn),
    };
    Ok(builder.build())
}
