package dynamo

import "strings"

// Dynamo's default namespace and component names (--namespace, --component).
const (
	DefaultNamespace = "dynamo"
	DefaultComponent = "backend"
)

// Subject returns the NATS subject Dynamo publishes a component's KV events
// on: "namespace.{ns}.component.{comp}.kv-events".
func Subject(namespace, component string) string {
	return "namespace." + namespace + ".component." + component + "." + KVEventTopic
}

// StreamName returns the JetStream stream name Dynamo's durable mode uses
// for the same events: the subject with dots turned into dashes and
// underscores into dashes, "namespace-{ns}-component-{comp}-kv-events".
func StreamName(namespace, component string) string {
	return strings.NewReplacer(".", "-", "_", "-").Replace(Subject(namespace, component))
}
