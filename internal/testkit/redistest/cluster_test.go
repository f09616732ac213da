package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

func TestClusterServesEverySlot(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	cl := c.Client()
	ctx := context.Background()
	for i := range 50 {
		k := fmt.Sprint("k", i)
		if err := cl.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("set %s: %v", k, err)
		}
	}
	nodes, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(nodes, "master"); n != 3 {
		t.Errorf("%d masters:\n%s", n, nodes)
	}
	if !strings.HasPrefix(c.URL(), "redis://127.0.0.1:") || strings.Count(c.URL(), "addr=") != 2 {
		t.Errorf("URL %s", c.URL())
	}
}
