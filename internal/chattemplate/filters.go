package chattemplate

import (
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// pyFilter is a filter the package serves instead of the engine's, because
// the engine's differs from Python's Jinja2 in a way that changes prompts.
type pyFilter struct {
	name, renamed string
	fn            jinja.Value
}

// pyFilters are the replaced filters: tojson (see pyToJSON); map, whose
// engine version ignores a filter name (Llama 3.1's tool template does
// `map('trim')`, and the engine then returns the items untrimmed); trim,
// whose engine version strips Go's white space, not Python's (str.strip
// also strips U+001C..U+001F).
var pyFilters = []pyFilter{
	{"tojson", toJSONFilter, pyToJSONValue},
	{"map", "kvrouter_map", jinja.NewCallable("map", pyMap)},
	{"trim", "kvrouter_trim", jinja.NewCallable("trim", pyTrim)},
}

// pyTrim is Jinja2's trim: str.strip(chars), chars defaulting to white
// space as str.isspace defines it.
func pyTrim(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	s := printed(args[0])
	if len(args) > 1 && !args[1].IsNone() && !args[1].IsUndefined() {
		return jinja.NewString(strings.Trim(s, printed(args[1]))), nil
	}
	return jinja.NewString(strings.TrimFunc(s, pyIsSpace)), nil
}

// printed is a value as {{ }} prints it (strings as they are).
func printed(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	if v.IsUndefined() || v.IsNone() {
		return ""
	}
	return v.String()
}

// mapFilters are the filters map('name') can apply to each item.
var mapFilters = map[string]func(jinja.Value) (jinja.Value, error){
	"trim":   func(v jinja.Value) (jinja.Value, error) { return pyTrim([]jinja.Value{v}, nil) },
	"lower":  func(v jinja.Value) (jinja.Value, error) { return jinja.NewString(strings.ToLower(printed(v))), nil },
	"upper":  func(v jinja.Value) (jinja.Value, error) { return jinja.NewString(strings.ToUpper(printed(v))), nil },
	"string": func(v jinja.Value) (jinja.Value, error) { return jinja.NewString(printed(v)), nil },
	"tojson": func(v jinja.Value) (jinja.Value, error) { return pyToJSON([]jinja.Value{v}, nil) },
}

// pyMap is Jinja2's map over a list: map(attribute="a.b", default=d) picks
// an attribute (a dotted path) of each item; map("filter") applies one of
// mapFilters to each item. Other filter names fail loudly rather than
// return the items unchanged.
func pyMap(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || args[0].IsUndefined() || args[0].IsNone() {
		return jinja.NewList(nil), nil
	}
	if !args[0].IsList() {
		return jinja.Undefined(), fmt.Errorf("map: only lists are supported")
	}
	items := args[0].AsList().Items
	out := make([]jinja.Value, len(items))
	if attr, ok := kwargs["attribute"]; ok {
		def, hasDef := kwargs["default"]
		path := strings.Split(printed(attr), ".")
		for i, item := range items {
			v := item
			for _, k := range path {
				if !v.IsDict() {
					v = jinja.Undefined()
					break
				}
				got, found := v.AsDict().Get(k)
				if !found {
					got = jinja.Undefined()
				}
				v = got
			}
			if v.IsUndefined() && hasDef {
				v = def
			}
			out[i] = v
		}
		return jinja.NewList(out), nil
	}
	if len(args) < 2 || !args[1].IsString() {
		return jinja.Undefined(), fmt.Errorf("map: needs attribute= or a filter name")
	}
	name := args[1].AsString()
	f, ok := mapFilters[name]
	if !ok || len(args) > 2 {
		return jinja.Undefined(), fmt.Errorf("map(%q) with %d argument(s) is not supported", name, len(args)-2)
	}
	for i, item := range items {
		v, err := f(item)
		if err != nil {
			return jinja.Undefined(), err
		}
		out[i] = v
	}
	return jinja.NewList(out), nil
}
