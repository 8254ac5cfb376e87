// Starts the web chat. A file rather than an inline script, so the page's
// Content-Security-Policy can refuse every inline script.
import init from "/pkg/frontend.js";

init();
