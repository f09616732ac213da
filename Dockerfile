# Builds the consumer, producer and gateway binaries into one small image.
FROM golang:1.26-alpine AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/consumer ./cmd/consumer && \
    CGO_ENABLED=0 go build -trimpath -o /out/producer ./cmd/producer && \
    CGO_ENABLED=0 go build -trimpath -o /out/gateway ./cmd/gateway

FROM alpine:3.20
RUN adduser -D -u 10001 flightdeck && \
    mkdir -p /var/lib/flightdeck/spool && chown -R flightdeck /var/lib/flightdeck && \
    chmod 700 /var/lib/flightdeck/spool
COPY --from=build /out/consumer /out/producer /out/gateway /usr/local/bin/
USER flightdeck
# --http (the dashboard, the probes and /metrics) and --health (the probes and /metrics), as
# docker-compose.yml runs them, and the gateway's HTTP API (--listen); nothing listens unless
# the command says so.
EXPOSE 8080 9090 9091
ENTRYPOINT []
