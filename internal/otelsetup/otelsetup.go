// Package otelsetup builds the OpenTelemetry tracer provider of Flightdeck's binaries from the
// standard OTEL_* environment variables.
package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/flightdeck-ai/flightdeck/internal/tracing"
)

// ErrEndpoint reports an OTLP endpoint that is not an http or https URL.
var ErrEndpoint = errors.New("otelsetup: OTLP endpoint")

// ErrProtocol reports an OTLP protocol the binaries do not speak.
var ErrProtocol = errors.New("otelsetup: OTEL_EXPORTER_OTLP_PROTOCOL: want grpc or http/protobuf")

// Enabled reports whether the environment asks for traces: OTEL_TRACES_EXPORTER is otlp, or an
// OTLP endpoint is set, and neither OTEL_SDK_DISABLED nor OTEL_TRACES_EXPORTER=none turns them
// off.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// New returns a tracer provider that batches spans to the OTLP endpoint the environment names,
// over HTTP (the default) or gRPC, with the resource the environment describes and service
// as service.name unless OTEL_SERVICE_NAME gives one. It returns nil when Enabled is false.
// The exporter and the batcher read their own OTEL_EXPORTER_OTLP_* and OTEL_BSP_* variables,
// and the sampler OTEL_TRACES_SAMPLER. Shut the provider down to flush its last spans.
func New(ctx context.Context, getenv func(string) string, service string) (*sdktrace.TracerProvider, error) {
	if !Enabled(getenv) {
		return nil, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if v := getenv(name); v != "" {
			if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				// The exporter would log a parse error on its own and drop every span.
				return nil, fmt.Errorf("%w: %s %q: want a URL such as http://collector:4318", ErrEndpoint, name, v)
			}
		}
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	var err error
	switch strings.ToLower(strings.TrimSpace(proto)) {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%w: %q", ErrProtocol, proto)
	}
	if err != nil {
		return nil, fmt.Errorf("otelsetup: exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service)), resource.WithFromEnv(),
		resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && res == nil {
		return nil, fmt.Errorf("otelsetup: resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(tracing.IDGenerator{})), nil
}
