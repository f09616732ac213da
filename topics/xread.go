package topics

import (
	"strconv"
	"strings"
)

// IDLess orders stream entry ids "<ms>-<seq>" numerically.
func IDLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ai, _ := strconv.ParseUint(am, 10, 64)
	bi, _ := strconv.ParseUint(bm, 10, 64)
	if ai != bi {
		return ai < bi
	}
	x, _ := strconv.ParseUint(as, 10, 64)
	y, _ := strconv.ParseUint(bs, 10, 64)
	return x < y
}
