//! Where a request's card is shown: the card's code is fetched the first time one is
//! (see `deferred`).

use leptos::prelude::*;
use protocol::api::RequestKind;
use uuid::Uuid;

use crate::approval_card::ApprovalCard;
use crate::deferred::{Deferred, Unavailable};
use crate::input_card::InputCard;
use crate::stream::ChatStore;

/// A request's card: fields to fill in, or a call to approve.
#[component]
pub fn RequestCard(request_id: Uuid) -> impl IntoView {
    let store = expect_context::<ChatStore>();
    let kind = store
        .requests
        .with_untracked(|requests| requests.iter().find(|r| r.id == request_id).map(|r| r.kind));
    kind.map(|kind| view! { <Deferred load=move || card_view(kind, request_id) what="the card"/> })
}

/// Builds a card; a split point of the `cards` module.
#[leptos::wasm_split::wasm_split(cards, wasm_split_path = ::leptos::wasm_split, fallible)]
fn card_view(kind: RequestKind, request_id: Uuid) -> Result<AnyView, Unavailable> {
    Ok(match kind {
        RequestKind::Approval => view! { <ApprovalCard request_id/> }.into_any(),
        RequestKind::Input => view! { <InputCard request_id/> }.into_any(),
    })
}
