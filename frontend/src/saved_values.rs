//! What the conversation remembers: the values tools may reuse without asking again,
//! secrets masked, with a button to forget them.

use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::api::{SavedScope, SavedValue};
use protocol::unseen;

use crate::api;
use crate::deferred::{Deferred, Unavailable};
use crate::state::AppState;
use crate::stream::ChatStore;
use crate::value_text;

/// Who receives a remembered value: every tool sharing its key, or the one tool it was
/// given to. Neither means an old value no single tool claims, which nothing uses.
#[derive(Clone, Debug, PartialEq)]
enum Owner {
    Shared(String),
    Tool(String),
}

fn owner(saved: &SavedValue) -> Option<Owner> {
    match (&saved.memory_key, &saved.tool_name) {
        (Some(key), _) => Some(Owner::Shared(key.clone())),
        (None, Some(tool)) => Some(Owner::Tool(tool.clone())),
        (None, None) => None,
    }
}

/// What the panel and its list share.
#[derive(Clone, Copy)]
struct SavedValues {
    store: ChatStore,
    values: RwSignal<Vec<SavedValue>>,
    error: RwSignal<Option<String>>,
}

/// The remembered values of a conversation, counted in its header; the list opens with
/// the panel, its code fetched the first time it does (see `deferred`).
#[component]
pub fn SavedValuesPanel(store: ChatStore) -> impl IntoView {
    let app = expect_context::<AppState>();
    let panel = SavedValues {
        store,
        values: RwSignal::new(Vec::new()),
        error: RwSignal::new(None),
    };

    Effect::new(move |_| {
        app.reload.track();
        store.saved_version.track();
        let Some(token) = app.token() else {
            return;
        };
        spawn_local(async move {
            match api::get_session_values(&token, store.id).await {
                Ok(saved) => {
                    panel.values.set(saved.values);
                    panel.error.set(None);
                }
                Err(err) => {
                    if !app.report(&err) && err.status() != Some(404) {
                        panel.error.set(Some(err.message()));
                    }
                }
            }
        });
    });

    let opened = RwSignal::new(false);
    view! {
        <details
            class="saved-values"
            data-testid="saved-values"
            on:toggle=move |_| {
                if !opened.get_untracked() {
                    opened.set(true);
                }
            }
        >
            <summary>
                "Remembered"
                <span class="wide-only">" values"</span>
                " "
                <span class="count" data-testid="saved-count">
                    {move || panel.values.with(Vec::len)}
                </span>
            </summary>
            <div class="saved-body">
                <Show when=move || opened.get()>
                    <Deferred load=move || saved_values_list(panel) what="the remembered values"/>
                </Show>
            </div>
        </details>
    }
}

/// Builds the list; a split point of the `cards` module. A component, so that what it
/// reads while it is built never makes the page build it again.
#[leptos::wasm_split::wasm_split(cards, wasm_split_path = ::leptos::wasm_split, fallible)]
fn saved_values_list(panel: SavedValues) -> Result<AnyView, Unavailable> {
    Ok(view! { <SavedValuesList panel/> }.into_any())
}

/// The list with its buttons.
#[component]
fn SavedValuesList(panel: SavedValues) -> impl IntoView {
    let SavedValues {
        store,
        values,
        error,
    } = panel;
    let app = expect_context::<AppState>();
    let status = RwSignal::new(None::<String>);
    let clearing = RwSignal::new(false);

    let clear = move |_| {
        let Some(token) = app.token() else {
            return;
        };
        clearing.set(true);
        status.set(None);
        spawn_local(async move {
            match api::clear_session_values(&token, store.id).await {
                Ok(cleared) => {
                    status.set(Some(match cleared.cleared {
                        0 => "Nothing to forget.".to_owned(),
                        1 => "Forgot 1 value.".to_owned(),
                        n => format!("Forgot {n} values."),
                    }));
                    store.saved_version.update(|n| *n += 1);
                }
                Err(err) => {
                    if !app.report(&err) {
                        error.set(Some(err.message()));
                    }
                }
            }
            clearing.set(false);
        });
    };

    // One value forgotten, user-wide ones too.
    let forget = move |saved: SavedValue| {
        let Some(token) = app.token() else {
            return;
        };
        status.set(None);
        spawn_local(async move {
            match api::delete_saved_value(&token, store.id, &saved).await {
                Ok(_) => {
                    status.set(Some("Forgot 1 value.".to_owned()));
                    store.saved_version.update(|n| *n += 1);
                }
                Err(err) => {
                    if !app.report(&err) {
                        error.set(Some(err.message()));
                    }
                }
            }
        });
    };

    let count = move || values.with(Vec::len);
    // A field's label, when a card of this conversation named it.
    let label = move |name: &str| {
        store
            .requests
            .with(|requests| {
                requests
                    .iter()
                    .flat_map(|r| r.fields.iter())
                    .find(|f| f.name == name)
                    .map(|f| f.label().to_owned())
            })
            .unwrap_or_else(|| name.to_owned())
    };
    view! {
                <p class="hint">
                    "Tools reuse these instead of asking again. Secret values are never shown."
                </p>
                <Show
                    when=move || { count() > 0 }
                    fallback=|| {
                        view! { <p class="hint" data-testid="saved-empty">"Nothing remembered yet."</p> }
                    }
                >
                    <dl class="saved-list">
                        <For
                            each=move || values.get()
                            key=|v| {
                                (
                                    v.name.clone(),
                                    v.tool_name.clone(),
                                    v.memory_key.clone(),
                                    v.scope == SavedScope::User,
                                    v.updated_at,
                                )
                            }
                            let:saved
                        >
                            <div
                                class="saved-row"
                                class:unused=owner(&saved).is_none()
                                data-testid="saved-value"
                                data-name=saved.name.clone()
                                data-tool=saved.tool_name.clone()
                                data-memory-key=saved.memory_key.clone()
                            >
                                <dt title=saved.name.clone()>
                                    {saved.label.clone().unwrap_or_else(|| label(&saved.name))}
                                </dt>
                                <dd class="saved-owner" data-testid="saved-owner">
                                    {match owner(&saved) {
                                        Some(Owner::Shared(key)) => {
                                            view! { "shared as "<code>{key}</code> }.into_any()
                                        }
                                        Some(Owner::Tool(tool)) => {
                                            view! { "for "<code>{unseen::written_out(&tool)}</code> }.into_any()
                                        }
                                        None => {
                                            view! {
                                                <span title="Kept from before values belonged to a tool; no tool receives it">
                                                    "not used"
                                                </span>
                                            }
                                                .into_any()
                                        }
                                    }}
                                </dd>
                                <dd>
                                    <span class:secret=saved.is_secret data-testid="saved-text">
                                        {if saved.is_secret {
                                            protocol::fields::MASKED.to_owned()
                                        } else {
                                            value_text::plain(&saved.value)
                                        }}
                                    </span>
                                    <span class="scope">
                                        {match saved.scope {
                                            SavedScope::Session => "this conversation",
                                            SavedScope::User => "all your conversations",
                                        }}
                                    </span>
                                    <button
                                        type="button"
                                        class="link-button forget"
                                        data-testid="forget-saved"
                                        aria-label=format!(
                                            "Forget {}",
                                            saved.label.clone().unwrap_or_else(|| saved.name.clone()),
                                        )
                                        on:click={
                                            let saved = saved.clone();
                                            move |_| forget(saved.clone())
                                        }
                                    >
                                        "Forget"
                                    </button>
                                </dd>
                            </div>
                        </For>
                    </dl>
                    <button
                        type="button"
                        data-testid="clear-saved"
                        disabled=move || clearing.get()
                        on:click=clear
                    >
                        "Forget this conversation's values"
                    </button>
                </Show>
                <p class="field-error" role="alert">{move || error.get()}</p>
                <p class="hint" role="status" data-testid="saved-status">{move || status.get()}</p>
    }
}
