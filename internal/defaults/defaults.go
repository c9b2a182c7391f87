// Package defaults applies configuration defaults, one call a field, for
// the configs whose zero fields take documented defaults (the server's and
// the SDK's alike): the field's comment names the default, and the
// config's withDefaults or constructor applies it here. It imports
// nothing, because the SDK imports it and must not link the server.
//
// The default is an argument, so it is evaluated whether or not it is
// taken. A default that depends on a condition, costs or does something to
// compute, or needs validation that comes later, stays a plain if; so does
// a func-typed field, which is not comparable.
//
// Files:
//   - defaults.go: IfZero (zero takes the default, so a negative value can
//     mean "off") and IfNotPositive (zero and negative values alike).
package defaults

// IfZero sets *field to def when *field is its type's zero value. Only
// zero takes the default, so a field can give a negative value a meaning
// of its own (most often "off").
func IfZero[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// IfNotPositive sets *field to def when *field is zero or negative: for
// fields where a negative value means nothing of its own, it means the
// default rather than an error.
func IfNotPositive[T ~int | ~int32 | ~int64](field *T, def T) {
	if *field <= 0 {
		*field = def
	}
}
