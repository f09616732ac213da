package gateway

import (
	_ "embed"
	"net/http"
)

// openAPIDoc is the OpenAPI 3 document of the routes, served at /v1/openapi.json.
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the OpenAPI 3 document of the API, the one GET /v1/openapi.json serves.
func OpenAPI() []byte { return append([]byte(nil), openAPIDoc...) }

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request, _ *tenantToken) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(openAPIDoc)
}
