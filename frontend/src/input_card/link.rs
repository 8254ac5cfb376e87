//! URL mode: an MCP server wants the user on one of its pages.

use leptos::prelude::*;

/// The parts of a link, so the card can show which site it leads to:
/// `("https://", "auth.example.com", "/connect?x=1")`.
fn link_parts(url: &str) -> (&str, &str, &str) {
    let (scheme, rest) = url.split_at(url.find("://").map_or(0, |at| at + 3));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (host, path) = rest.split_at(end);
    (scheme, host, path)
}

/// URL mode: the server wants the user on one of its pages (a sign-in, a payment).
/// The page opens only when the user clicks, in a new tab that cannot reach back to
/// the chat; "Done" tells the server the user has finished there.
#[component]
pub(super) fn LinkStep(
    url: String,
    sending: RwSignal<bool>,
    card_error: RwSignal<Option<String>>,
    on_done: Callback<()>,
    on_decline: Callback<()>,
    on_cancel: Callback<()>,
) -> impl IntoView {
    let (scheme, host, path) = link_parts(&url);
    let (scheme, host, path) = (scheme.to_owned(), host.to_owned(), path.to_owned());
    let opened = RwSignal::new(false);
    let open_label = format!("Open {host}");
    view! {
        <div class="card-link" data-testid="card-link">
            <p class="link-target">
                "This opens "
                <span class="link-url" data-testid="link-url">
                    {scheme}
                    <strong class="link-host" data-testid="link-host">{host}</strong>
                    {path}
                </span>
                " in a new tab. Check the site's name before you sign in or pay anything."
            </p>
            <p class="card-error" role="alert" data-testid="card-error">
                {move || card_error.get()}
            </p>
            <div class="card-actions">
                <a
                    class="button"
                    href=url
                    target="_blank"
                    rel="noopener noreferrer"
                    data-testid="card-open-link"
                    on:click=move |_| opened.set(true)
                >
                    {open_label}
                </a>
                <button
                    type="button"
                    class=move || if opened.get() { "primary" } else { "" }
                    data-testid="card-submit"
                    title="Tell the server you have finished on its page"
                    disabled=move || sending.get()
                    on:click=move |_| on_done.run(())
                >
                    {move || if sending.get() { "Sending…" } else { "Done" }}
                </button>
                <button
                    type="button"
                    data-testid="card-decline"
                    title="Tell the server you won't open this"
                    disabled=move || sending.get()
                    on:click=move |_| on_decline.run(())
                >
                    "Decline"
                </button>
                <button
                    type="button"
                    data-testid="card-cancel"
                    title="Dismiss without answering"
                    disabled=move || sending.get()
                    on:click=move |_| on_cancel.run(())
                >
                    "Cancel"
                </button>
            </div>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_split_so_its_site_stands_out() {
        assert_eq!(
            link_parts("https://auth.example.com/connect?x=1"),
            ("https://", "auth.example.com", "/connect?x=1")
        );
        assert_eq!(
            link_parts("https://example.org"),
            ("https://", "example.org", "")
        );
        assert_eq!(
            link_parts("https://example.org?next=/a"),
            ("https://", "example.org", "?next=/a")
        );
    }
}
