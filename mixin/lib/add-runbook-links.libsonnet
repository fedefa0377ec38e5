// Adds a runbook_url annotation to every alert, pointing at the alert's own
// section of the runbook. Applied once, after all alerts are defined, so no
// alert can forget its link.
{
  prometheusAlerts+:: {
    groups: std.map(
      function(group) group {
        rules: std.map(
          function(rule)
            if std.objectHas(rule, 'alert') then
              rule {
                annotations+: {
                  runbook_url: $._config.runbookURLPattern % std.asciiLower(rule.alert),
                },
              }
            else rule,
          super.rules
        ),
      },
      super.groups
    ),
  },
}
