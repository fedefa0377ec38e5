// Adds a runbook_url annotation to every alert, pointing at the alert's own
// section of the runbook. Applied once, after all alerts are defined, so no
// alert can forget its link; an alert that already has a runbook_url (set by
// an override of the mixin) keeps it.
{
  prometheusAlerts+:: {
    groups: std.map(
      function(group) group {
        rules: std.map(
          function(rule)
            if std.objectHas(rule, 'alert')
               && !std.objectHas(std.get(rule, 'annotations', {}), 'runbook_url') then
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
