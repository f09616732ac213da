package otelsetup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/otelsetup"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/otlptest"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// TestEnabled: traces are on with an OTLP endpoint or OTEL_TRACES_EXPORTER=otlp, and off by
// default, with OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none.
func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, false},
	} {
		if got := otelsetup.Enabled(env(c.env)); got != c.want {
			t.Errorf("Enabled(%v) = %v", c.env, got)
		}
	}
}

// TestNewExportsOverHTTP: with an endpoint the provider exports spans over OTLP/HTTP under the
// service name given, unless OTEL_SERVICE_NAME names another; an unknown protocol, or an
// endpoint without its scheme, is refused; without configuration there is no provider.
func TestNewExportsOverHTTP(t *testing.T) {
	ctx := context.Background()
	if tp, err := otelsetup.New(ctx, env(nil), "svc"); tp != nil || err != nil {
		t.Fatalf("unconfigured: %v %v", tp, err)
	}
	if _, err := otelsetup.New(ctx, env(map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}), "svc"); !errors.Is(err, otelsetup.ErrProtocol) {
		t.Errorf("http/json: %v, want ErrProtocol", err)
	}
	for _, bad := range []string{"127.0.0.1:4318", "collector:4318", "ftp://x"} {
		if _, err := otelsetup.New(ctx, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": bad}), "svc"); !errors.Is(err, otelsetup.ErrEndpoint) {
			t.Errorf("endpoint %q: %v, want ErrEndpoint", bad, err)
		}
	}
	recv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL) // the exporter reads its own variables
	tp, err := otelsetup.New(ctx, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": recv.URL}), "svc")
	if err != nil || tp == nil {
		t.Fatalf("New: %v %v", tp, err)
	}
	_, sp := tp.Tracer("test").Start(ctx, "hello")
	sp.End()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tp.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	got := recv.Spans(nil)
	if len(got) != 1 || got[0].Name != "hello" || got[0].Service != "svc" || got[0].TraceID != sp.SpanContext().TraceID().String() {
		t.Errorf("received %+v", got)
	}
}
