package fleet

import "fmt"

// Role is what part of a request a worker serves in a disaggregated
// (prefill/decode) fleet.
type Role string

// Roles. The zero value reads as RoleBoth, so that records written
// before roles existed keep their meaning.
const (
	// RoleBoth serves whole requests (aggregated serving).
	RoleBoth Role = "both"
	// RolePrefill serves only the prefill hop of a disaggregated request.
	RolePrefill Role = "prefill"
	// RoleDecode serves the decode hop, and whole requests whose prefill
	// hop was skipped.
	RoleDecode Role = "decode"
)

// Normal returns the role with the empty value read as RoleBoth.
func (r Role) Normal() Role {
	if r == "" {
		return RoleBoth
	}
	return r
}

// ParseRole parses "prefill", "decode" or "both" ("" and "agg" mean
// both).
func ParseRole(s string) (Role, error) {
	switch s {
	case "", "both", "agg", "aggregated":
		return RoleBoth, nil
	case "prefill":
		return RolePrefill, nil
	case "decode":
		return RoleDecode, nil
	}
	return "", fmt.Errorf("role %q: want prefill, decode or both", s)
}
