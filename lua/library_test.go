package lua_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/lua"
)

// TestEnsureLibrary walks the start-up check of the flight library through each state Redis
// can be in, under a credential that may load functions and one that may not.
func TestEnsureLibrary(t *testing.T) {
	ctx := context.Background()
	name, src := lua.Library()
	// A library of the same name that holds other code: what a hostile load leaves.
	patched := strings.Replace(src, "redis.register_function", "redis.log(redis.LOG_WARNING, 'patched')\nredis.register_function", 1)
	srv := redistest.Start(t, &redistest.Options{ACL: []string{
		"user default on nopass ~* &* +@all",
		"user tenant on >pw resetkeys ~t:* resetchannels -@all +ping +fcall +function|list",
	}})
	admin := srv.Client()
	defer admin.Close()
	tenant := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "tenant", Password: "pw"})
	defer tenant.Close()

	t.Run("MissingWithoutLoadRight", func(t *testing.T) {
		err := lua.EnsureLibrary(ctx, tenant)
		if !errors.Is(err, lua.ErrLibraryMissing) || !strings.Contains(err.Error(), "--load-functions") ||
			!strings.Contains(err.Error(), name) {
			t.Fatalf("err = %v, want ErrLibraryMissing naming %s and --load-functions", err, name)
		}
	})
	t.Run("MissingIsLoaded", func(t *testing.T) {
		if err := lua.EnsureLibrary(ctx, admin); err != nil {
			t.Fatal(err)
		}
		if err := lua.EnsureLibrary(ctx, tenant); err != nil {
			t.Fatalf("the tenant's check of the loaded library: %v", err)
		}
	})
	t.Run("TenantCannotReplace", func(t *testing.T) {
		err := tenant.FunctionLoadReplace(ctx, patched).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("FUNCTION LOAD REPLACE under the tenant's credential: %v, want NOPERM", err)
		}
	})
	t.Run("TamperedIsRefused", func(t *testing.T) {
		if err := admin.FunctionLoadReplace(ctx, patched).Err(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*redis.Client{admin, tenant} {
			if err := lua.EnsureLibrary(ctx, c); !errors.Is(err, lua.ErrLibraryTampered) {
				t.Fatalf("err = %v, want ErrLibraryTampered: a consumer must never run or silently replace other code", err)
			}
		}
		// A call that finds the library does not reload it: only the operator's load restores it.
		if err := lua.LoadLibrary(ctx, admin, false); !errors.Is(err, lua.ErrLibraryTampered) {
			t.Fatalf("load without replace over other code: %v, want ErrLibraryTampered", err)
		}
		if err := lua.LoadLibrary(ctx, admin, true); err != nil {
			t.Fatal(err)
		}
		if err := lua.EnsureLibrary(ctx, tenant); err != nil {
			t.Fatalf("after the operator's load: %v", err)
		}
	})
	t.Run("LostAtRunTime", func(t *testing.T) {
		if err := admin.FunctionDelete(ctx, name).Err(); err != nil {
			t.Fatal(err)
		}
		err := lua.Handover.Run(ctx, tenant, []string{"t:a", "t:b", "t:c", "t:d"}, "1").Err()
		if !errors.Is(err, lua.ErrLibraryMissing) {
			t.Fatalf("a call after Redis lost the library, under the tenant: %v, want ErrLibraryMissing", err)
		}
		// Where the credential may, the call loads it and goes on.
		if err := lua.Handover.Run(ctx, admin, []string{"t:a", "t:b", "t:c", "t:d"}, "1").Err(); err != nil && isNoFunction(err) {
			t.Fatalf("a call under a loading credential: %v", err)
		}
		if err := lua.EnsureLibrary(ctx, tenant); err != nil {
			t.Fatal(err)
		}
	})
}

func isNoFunction(err error) bool { return strings.Contains(err.Error(), "Function not found") }
