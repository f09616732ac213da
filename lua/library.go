package lua

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The flight library on a shared Redis, see docs/DESIGN.md section 1 and docs/SECURITY.md.
// Redis Functions are global to the server, and FUNCTION LOAD REPLACE lets whoever may load
// functions replace the code every caller of a library runs. So a consumer never replaces the
// library. It loads it only when it is missing and its credential may, and checks at start
// that the library Redis holds under its name is this build's code, byte for byte.
// Replacing a library is an operator's act: LoadLibrary with replace, or
// `consumer --load-functions`.

// Errors of the flight library.
var (
	// ErrNoFunctions reports a Redis without Redis Functions, older than 7.0.
	ErrNoFunctions = errors.New("lua: Redis 7.0 or later is required (FUNCTION LOAD)")
	// ErrLibraryMissing reports that Redis does not hold the flight library and the caller's
	// credential may not load it. An operator loads it with `consumer --load-functions`.
	ErrLibraryMissing = errors.New("lua: the flight function library is not loaded and this credential may not load it")
	// ErrLibraryTampered reports that Redis holds other code under the flight library's
	// name: somebody replaced it. Nothing calls it until an operator loads it again.
	ErrLibraryTampered = errors.New("lua: the flight function library in Redis is not this build's code")
)

// EnsureLibrary checks on every master of a cluster that Redis holds the flight library with
// exactly this build's code, and loads a missing one with FUNCTION LOAD, never REPLACE. It
// fails with ErrLibraryMissing when the credential may not load it and ErrLibraryTampered
// when other code has the library's name, both naming the library and the remedy.
func EnsureLibrary(ctx context.Context, c redis.UniversalClient) error {
	return onMasters(ctx, c, func(ctx context.Context, n redis.Cmdable) error {
		for attempt := 0; ; attempt++ {
			found, same, err := listLibrary(ctx, n)
			switch {
			case err != nil:
				return err
			case found && same:
				return nil
			case found:
				return fmt.Errorf("%w: %s (load it again with `consumer --load-functions` under an operator credential)",
					ErrLibraryTampered, flightLib.name)
			case attempt > 0:
				return fmt.Errorf("lua: library %s: loaded, but not listed", flightLib.name)
			}
			if err := loadOn(ctx, n, false); err != nil && !alreadyExists(err) {
				return err
			}
			// Loaded, here or by another consumer first: check what is there now.
		}
	})
}

// LoadLibrary is the operator's load of the flight library on every master of a cluster, as in
// `consumer --load-functions`. With replace, FUNCTION LOAD REPLACE also replaces other code of
// that name. Consumers load only what is missing.
func LoadLibrary(ctx context.Context, c redis.UniversalClient, replace bool) error {
	return onMasters(ctx, c, func(ctx context.Context, n redis.Cmdable) error {
		err := loadOn(ctx, n, replace)
		if err != nil && !replace && alreadyExists(err) {
			_, same, lerr := listLibrary(ctx, n)
			if lerr != nil {
				return lerr
			}
			if !same {
				return fmt.Errorf("%w: %s", ErrLibraryTampered, flightLib.name)
			}
			return nil
		}
		return err
	})
}

// loadMissing loads the library where it is missing, after a call found no function. It never
// replaces one.
func loadMissing(ctx context.Context, c redis.UniversalClient) error {
	return onMasters(ctx, c, func(ctx context.Context, n redis.Cmdable) error {
		if err := loadOn(ctx, n, false); err != nil && !alreadyExists(err) {
			return err
		}
		return nil
	})
}

// listLibrary reports whether n holds the flight library and whether its code is this build's.
func listLibrary(ctx context.Context, n redis.Cmdable) (found, same bool, err error) {
	libs, err := n.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: flightLib.name, WithCode: true}).Result()
	if err != nil {
		return false, false, fmt.Errorf("lua: list library %s: %w", flightLib.name, noFunctions(err))
	}
	for _, l := range libs {
		if l.Name == flightLib.name {
			return true, l.Code == flightLib.src, nil
		}
	}
	return false, false, nil
}

func loadOn(ctx context.Context, n redis.Cmdable, replace bool) error {
	var err error
	if replace {
		err = n.FunctionLoadReplace(ctx, flightLib.src).Err()
	} else {
		err = n.FunctionLoad(ctx, flightLib.src).Err()
	}
	switch {
	case err == nil, alreadyExists(err):
		return err
	case strings.HasPrefix(err.Error(), "NOPERM"):
		return fmt.Errorf("%w: %s (load it with `consumer --load-functions` under an operator credential): %w",
			ErrLibraryMissing, flightLib.name, err)
	}
	return fmt.Errorf("lua: load library %s: %w", flightLib.name, noFunctions(err))
}

func alreadyExists(err error) bool {
	return err != nil && strings.Contains(err.Error(), "already exists")
}

// noFunctions marks the error of a Redis that has no FUNCTION command.
func noFunctions(err error) error {
	if strings.Contains(strings.ToLower(err.Error()), "unknown command") {
		return fmt.Errorf("%w: %w", ErrNoFunctions, err)
	}
	return err
}

func onMasters(ctx context.Context, c redis.UniversalClient, f func(context.Context, redis.Cmdable) error) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return f(ctx, n) })
	}
	return f(ctx, c)
}
