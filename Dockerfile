# loopguard: multi-stage build, small non-root runtime image.
#
#   docker build -t loopguard .
#   docker run --rm -p 8080:8080 loopguard
#
# The build stage runs the same command as `cargo build --release --locked --bin loopguard`.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# C toolchain for zstd-sys, ring and mimalloc (built with the CFLAGS of
# .cargo/config.toml, as on a developer's machine).
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
COPY Cargo.toml Cargo.lock ./
COPY .cargo ./.cargo
COPY src ./src
COPY benches ./benches
COPY config ./config
RUN cargo build --release --locked --bin loopguard

FROM debian:bookworm-slim AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home loopguard
COPY --from=build /src/target/release/loopguard /usr/local/bin/loopguard
COPY config/loopguard.toml /etc/loopguard/loopguard.toml
USER 10001
# Listen on every interface inside the container; the admin listener stays
# on loopback (reachable by a sidecar's neighbour, not from outside).
ENV LOOPGUARD_LISTEN=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["loopguard", "healthcheck"]
ENTRYPOINT ["loopguard", "--log-format", "json"]
CMD ["serve", "--config", "/etc/loopguard/loopguard.toml"]
