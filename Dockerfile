# syntax=docker/dockerfile:1

# ---- build: browser bundle + server binary ---------------------------------
# Built by the same functions the test command uses (scripts/lib.sh), so the image
# serves exactly the bundle the browser tests check: wasm-opt'd and gzipped.
FROM rust:1.95-bookworm AS builder

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# npm: build_frontend takes wasm-opt from npm's binaryen, because Debian's binaryen
# produces wasm that Chromium rejects; zopfli writes the gzip files served beside the
# bundle. Versions come with the pinned base image.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends npm zopfli \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src

# The wasm target, the wasm-bindgen CLI matching Cargo.lock and the pinned wasm-split
# CLI, in a layer of their own: they take minutes to build and change only with the
# lock file and lib.sh.
COPY Cargo.lock ./
COPY scripts/lib.sh scripts/
RUN source scripts/lib.sh && ensure_wasm_toolchain

# No database at build time: the SQL is checked against backend/.sqlx
# (SQLX_OFFLINE=true comes from .cargo/config.toml).
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    --mount=type=cache,target=/root/.npm \
    source scripts/lib.sh \
 && build_frontend release \
 && step "cargo build --release -p backend" \
 && cargo build --release -p backend \
 && mkdir -p /out \
 && cp target/release/toolgate /out/toolgate

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim

# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 toolgate \
 && useradd --system --uid 10001 --gid toolgate --home-dir /app --shell /usr/sbin/nologin toolgate \
 && mkdir -p /app/data \
 && chown toolgate:toolgate /app/data

# Database migrations are embedded in the binary.
COPY --from=builder /out/toolgate /app/toolgate
COPY --from=builder /src/frontend/dist /app/web
COPY tools.example.toml /app/tools.toml

# All interfaces inside the container, so the published port reaches it; dev sign-in
# is off unless asked for, and then refused here without the explicit override.
ENV TOOLGATE_BIND=0.0.0.0:3000 \
    TOOLGATE_WEB_DIR=/app/web \
    TOOLGATE_TOOLS=/app/tools.toml \
    TOOLGATE_DATA_DIR=/app/data

USER 10001:10001
WORKDIR /app
EXPOSE 3000
CMD ["/app/toolgate"]
