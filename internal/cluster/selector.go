package cluster

// Selects reports whether a Service selector picks a pod with these labels (every selector
// label present with its value; an empty selector picks nothing, as a Service without
// selector has no endpoints of its own).
func Selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
