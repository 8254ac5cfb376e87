# syntax=docker/dockerfile:1

# ---- build: browser bundle + server binary ---------------------------------
FROM rust:1.95-bookworm AS builder

# Must equal the wasm-bindgen crate version pinned in the workspace (Cargo.lock).
ARG WASM_BINDGEN_VERSION=0.2.130

RUN rustup target add wasm32-unknown-unknown \
 && cargo install wasm-bindgen-cli --version "${WASM_BINDGEN_VERSION}"

WORKDIR /src
COPY . .

RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    set -eux; \
    cargo build -p frontend --target wasm32-unknown-unknown --profile wasm-release; \
    rm -rf frontend/dist; \
    mkdir -p frontend/dist/pkg; \
    wasm-bindgen --target web --no-typescript --out-dir frontend/dist/pkg \
        target/wasm32-unknown-unknown/wasm-release/frontend.wasm; \
    cp frontend/index.html frontend/dist/; \
    if [ -f frontend/style.css ]; then cp frontend/style.css frontend/dist/; fi; \
    cargo build --release -p backend; \
    mkdir -p /out; \
    cp target/release/toolgate /out/toolgate

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /app --shell /usr/sbin/nologin toolgate \
 && mkdir -p /app/data \
 && chown toolgate:toolgate /app/data

# Database migrations are embedded in the binary.
COPY --from=builder /out/toolgate /app/toolgate
COPY --from=builder /src/frontend/dist /app/web
COPY tools.example.toml /app/tools.toml

ENV TOOLGATE_BIND=0.0.0.0:3000 \
    TOOLGATE_WEB_DIR=/app/web \
    TOOLGATE_TOOLS=/app/tools.toml \
    TOOLGATE_DATA_DIR=/app/data

USER toolgate
WORKDIR /app
EXPOSE 3000
CMD ["/app/toolgate"]
