//! What the service pushes, in its document beside what it answers: the 16 outgoing webhooks
//! as OpenAPI 3.1 `webhooks` (body `{id, type, created_at, data}`, `data` the REST view the
//! recipient reads), and the frames of the two WebSockets as the content of their `101`
//! answers. A client developer finds every message they will receive in `/openapi.json`.

use utoipa::ToSchema;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem, Paths};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, ResponseBuilder, Schema};

use super::error::ErrorBody;
use super::routes::{
    applications::ApplicationView, disputes::DisputeView, escrow_views::MilestoneView,
    escrow_views::PaymentView, invoices::InvoiceView, milestones::DeliveryView,
    notifications::NotificationView, projects::ProjectView, reviews::ReviewView,
};
use crate::domain::invoice::DocumentKind;
use crate::workflows::chat::MessageView;
use crate::workflows::webhooks::EVENT_TYPES;

pub fn describe(openapi: &mut OpenApi) {
    openapi.webhooks = Some(webhooks());
    describe_socket(
        openapi,
        "/api/ws/notifications",
        notification_frames(),
        "Client frames: none (pings are answered). Server frames, one JSON text message each: \
         first `unread_count`, then every notification stored for the caller.",
    );
    describe_socket(
        openapi,
        "/api/ws/chat/{project_id}",
        chat_frames(),
        "Client frames: `{\"type\": \"message\", \"content\": \"…\"}` (1–5000 characters, the \
         chat budget of `CHAT_MESSAGES_PER_MINUTE`) and `{\"type\": \"typing\"}`. Server frames, \
         one JSON text message each, as below; a refused client frame gets an `error` frame \
         whose `data` is the body REST would answer.",
    );
}

/// The REST view an event's `data` is.
fn view_of(event_type: &str) -> std::borrow::Cow<'static, str> {
    let invoices = [DocumentKind::Invoice, DocumentKind::CreditNote].map(DocumentKind::as_str);
    match event_type.split('.').next().unwrap_or_default() {
        document if invoices.contains(&document) => InvoiceView::name(),
        "project" => ProjectView::name(),
        "application" => ApplicationView::name(),
        "milestone" => MilestoneView::name(),
        "payment" => PaymentView::name(),
        "delivery" => DeliveryView::name(),
        "dispute" => DisputeView::name(),
        _ => ReviewView::name(),
    }
}

fn text() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

fn time() -> ObjectBuilder {
    text().format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
}

fn one_of(values: &[&str]) -> ObjectBuilder {
    text().enum_values(Some(values.iter().copied()))
}

fn webhooks() -> Paths {
    let mut paths = Paths::new();
    for event_type in EVENT_TYPES {
        let body = ObjectBuilder::new()
            .property(
                "id",
                text().description(Some("The `webhook-id` header: de-duplicate by it")),
            )
            .property("type", one_of(&[event_type]))
            .property("created_at", time())
            .property("data", Ref::from_schema_name(view_of(event_type)))
            .required("id")
            .required("type")
            .required("created_at")
            .required("data");
        let operation = OperationBuilder::new()
            .operation_id(Some(format!("webhook_{}", event_type.replace('.', "_"))))
            .summary(Some(format!("`{event_type}`, sent to the user's webhook")))
            .description(Some(
                "POSTed to the user's webhook URL with `webhook-id`, `webhook-timestamp` and \
                 `webhook-signature: v1,<base64 HMAC-SHA256 of \"id.timestamp.body\">` \
                 (Standard Webhooks), and with method `JWT` an `Authorization: Bearer` HS256 \
                 JWT carrying `body_sha256`. Retried until a 2xx; the same event is listed by \
                 `GET /api/users/me/events`.",
            ))
            .tag("webhooks")
            .request_body(Some(
                RequestBodyBuilder::new()
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Schema::Object(body.build())))
                            .build(),
                    )
                    .build(),
            ))
            .response(
                "2XX",
                ResponseBuilder::new().description("Received: not sent again"),
            )
            .build();
        paths.paths.insert(
            event_type.to_owned(),
            PathItem::new(HttpMethod::Post, operation),
        );
    }
    paths
}

/// `{type, data}` with `type` one of `types` and `data` the schema given.
fn frame(types: &[&str], data: impl Into<RefOr<Schema>>) -> Schema {
    Schema::Object(
        ObjectBuilder::new()
            .property("type", one_of(types))
            .property("data", data)
            .required("type")
            .required("data")
            .build(),
    )
}

fn chat_frames() -> Schema {
    let read = ObjectBuilder::new()
        .property("user_id", ObjectBuilder::new().schema_type(Type::Integer))
        .property(
            "up_to_message_id",
            ObjectBuilder::new().schema_type(Type::Integer),
        );
    let typing =
        ObjectBuilder::new().property("user_id", ObjectBuilder::new().schema_type(Type::Integer));
    Schema::OneOf(
        OneOfBuilder::new()
            .item(frame(
                &["message.created", "message.updated", "message.deleted"],
                Ref::from_schema_name(MessageView::name()),
            ))
            .item(frame(&["read"], read))
            .item(frame(&["typing"], typing))
            .item(frame(&["error"], Ref::from_schema_name(ErrorBody::name())))
            .build(),
    )
}

fn notification_frames() -> Schema {
    let unread = ObjectBuilder::new()
        .property("type", one_of(&["unread_count"]))
        .property(
            "data",
            ObjectBuilder::new()
                .property("unread", ObjectBuilder::new().schema_type(Type::Integer)),
        )
        .required("type");
    Schema::OneOf(
        OneOfBuilder::new()
            .item(Schema::Object(unread.build()))
            .item(Ref::from_schema_name(NotificationView::name()))
            .build(),
    )
}

/// Gives the socket route's `101` answer the frames it then sends.
fn describe_socket(openapi: &mut OpenApi, path: &str, frames: Schema, description: &str) {
    let Some(op) = openapi
        .paths
        .paths
        .get_mut(path)
        .and_then(|item| item.get.as_mut())
    else {
        return;
    };
    op.responses.responses.insert(
        "101".to_owned(),
        RefOr::T(
            ResponseBuilder::new()
                .description(format!(
                    "Switching to the WebSocket protocol. {description}"
                ))
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(frames)).build(),
                )
                .build(),
        ),
    );
}
