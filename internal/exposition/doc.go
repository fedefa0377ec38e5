// Package exposition turns the results of one run of the checks into
// metric families (New) and writes them in the text, OpenMetrics or
// protobuf format (Exposition.Write): the framework's families, and each
// provider's own from its verdicts' Facts, collected once per verdict
// (CollectFacts, FactsMemo).
package exposition
