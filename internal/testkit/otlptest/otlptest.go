// Package otlptest is an OTLP/HTTP trace receiver for tests: it collects the spans that
// processes export to it, to be looked up by trace, parent and name.
package otlptest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, with its ids in hex and its service's name.
type Span struct {
	Service, Name             string
	TraceID, SpanID, ParentID string
	Kind                      tracepb.Span_SpanKind
	Attributes                map[string]string
	Links                     []Link
	Error                     bool
}

// Link is a span's link to another span.
type Link struct{ TraceID, SpanID string }

// Receiver is a running receiver. Point OTEL_EXPORTER_OTLP_ENDPOINT at URL.
type Receiver struct {
	*httptest.Server
	ok     []byte // the export response
	mu     sync.Mutex
	bodies [][]byte // received, not decoded yet
	spans  []Span
}

// Start starts a receiver; it closes when the test ends.
func Start(tb interface{ Cleanup(func()) }) *Receiver {
	ok, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	r := &Receiver{ok: ok}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	tb.Cleanup(r.Close)
	return r
}

// serve takes an export request. It keeps the body as it came and decodes it when the spans
// are asked for, so that receiving costs the processes under test, which share the machine,
// as little as a collector on another host would.
func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil || req.URL.Path != "/v1/traces" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.bodies = append(r.bodies, body)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(r.ok)
}

// decode moves the spans of the bodies received to r.spans. r.mu is held.
func (r *Receiver) decode() {
	for _, body := range r.bodies {
		var in collectortrace.ExportTraceServiceRequest
		if proto.Unmarshal(body, &in) != nil {
			continue // its spans are missing, which the test waiting for them reports
		}
		for _, rs := range in.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					sp := Span{Service: service, Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()),
						SpanID: hex.EncodeToString(s.GetSpanId()), ParentID: hex.EncodeToString(s.GetParentSpanId()),
						Kind: s.GetKind(), Attributes: map[string]string{}, Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR}
					for _, kv := range s.GetAttributes() {
						sp.Attributes[kv.GetKey()] = text(kv.GetValue())
					}
					for _, l := range s.GetLinks() {
						sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
					}
					r.spans = append(r.spans, sp)
				}
			}
		}
	}
	r.bodies = nil
}

// text is an attribute's value as text: a string as it is, an integer in decimal.
func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return v.String()
}

// Spans returns the spans received so far that match keep, or all for nil.
func (r *Receiver) Spans(keep func(Span) bool) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decode()
	var out []Span
	for _, s := range r.spans {
		if keep == nil || keep(s) {
			out = append(out, s)
		}
	}
	return out
}
