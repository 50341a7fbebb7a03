package jsontext

// SkipSpace returns the index of the first byte at or after i that is not
// JSON white space (space, tab, newline, carriage return), or len(b).
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
