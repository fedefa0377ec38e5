// A small set of Grafana building blocks in plain jsonnet: grafonnet cannot be
// fetched here, and the few panel kinds the dashboards need fit on a page.
// Panels are plain objects; layout() gives them ids and grid positions.
local datasource = { type: 'prometheus', uid: '${datasource}' };

local panel(type, title, description, targets) = {
  type: type,
  title: title,
  description: description,
  datasource: datasource,
  targets: [
    t { refId: std.char(std.codepoint('A') + i) }
    for i in std.range(0, std.length(targets) - 1)
    for t in [targets[i]]
  ],
  gridPos: { w: 12, h: 8 },
  fieldConfig: { defaults: {}, overrides: [] },
  options: {},
};

{
  datasource: datasource,

  // A range query drawn as a time series, one line per legend.
  target(expr, legend=''):: {
    datasource: datasource,
    expr: expr,
    legendFormat: legend,
    range: true,
    instant: false,
  },

  // An instant query rendered as table rows, one per series.
  tableTarget(expr):: {
    datasource: datasource,
    expr: expr,
    format: 'table',
    range: false,
    instant: true,
  },

  size(w, h):: { gridPos: { w: w, h: h } },

  unit(u):: { fieldConfig+: { defaults+: { unit: u } } },

  // Thresholds as [[value or null, color], ...], the first step's value null.
  thresholds(steps):: {
    fieldConfig+: { defaults+: { thresholds: {
      mode: 'absolute',
      steps: [{ value: s[0], color: s[1] } for s in steps],
    } } },
  },

  // Value mappings as {value: [text, color]}.
  valueMappings(m):: {
    fieldConfig+: { defaults+: { mappings: [{
      type: 'value',
      options: {
        [k]: { text: m[k][0], color: m[k][1], index: i }
        for i in std.range(0, std.length(std.objectFields(m)) - 1)
        for k in [std.objectFields(m)[i]]
      },
    }] } },
  },

  // Overrides the color or style of the series whose display name matches.
  overrideByRegexp(regexp, properties):: {
    fieldConfig+: { overrides+: [{
      matcher: { id: 'byRegexp', options: regexp },
      properties: [{ id: k, value: properties[k] } for k in std.objectFields(properties)],
    }] },
  },

  fixedColor(color):: { fieldConfig+: { defaults+: { color: { mode: 'fixed', fixedColor: color } } } },

  timeseries(title, description, targets, stack=false)::
    panel('timeseries', title, description, targets) {
      fieldConfig+: { defaults+: { custom: {
        drawStyle: 'line',
        lineWidth: 1,
        fillOpacity: if stack then 30 else 0,
        showPoints: 'never',
        stacking: { mode: if stack then 'normal' else 'none', group: 'A' },
        spanNulls: false,
      } } },
      options: {
        legend: { displayMode: 'table', placement: 'right', showLegend: true, calcs: ['lastNotNull', 'max'] },
        tooltip: { mode: 'multi', sort: 'desc' },
      },
    },

  stateTimeline(title, description, targets)::
    panel('state-timeline', title, description, targets) {
      options: {
        mergeValues: true,
        showValue: 'auto',
        alignValue: 'left',
        rowHeight: 0.9,
        legend: { displayMode: 'list', placement: 'bottom', showLegend: false, calcs: [] },
        tooltip: { mode: 'single', sort: 'none' },
      },
    },

  stat(title, description, targets)::
    panel('stat', title, description, targets) {
      options: {
        reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
        colorMode: 'background',
        graphMode: 'none',
        justifyMode: 'auto',
        textMode: 'auto',
        orientation: 'auto',
        wideLayout: true,
        showPercentChange: false,
        percentChangeColorMode: 'standard',
      },
    },

  table(title, description, targets)::
    panel('table', title, description, targets) {
      options: { frameIndex: 0, showHeader: true, cellHeight: 'sm' },
    },

  barGauge(title, description, targets)::
    panel('bargauge', title, description, targets) {
      options: {
        reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
        orientation: 'horizontal',
        displayMode: 'gradient',
        showUnfilled: true,
        minVizHeight: 10,
        minVizWidth: 0,
        namePlacement: 'auto',
        valueMode: 'color',
        sizing: 'auto',
        maxVizHeight: 300,
        legend: { displayMode: 'list', placement: 'bottom', showLegend: false, calcs: [] },
      },
    },

  // A row across the grid: the panels after it, up to the next row, are
  // its own, and Grafana folds them away when it is collapsed.
  row(title):: {
    type: 'row',
    title: title,
    collapsed: false,
    panels: [],
    gridPos: { w: 24, h: 1 },
  },

  // Hides the time column and renames the others, for instant tables.
  organize(renames, exclude=['Time'])::
    {
      transformations+: [{
        id: 'organize',
        options: {
          excludeByName: { [f]: true for f in exclude },
          renameByName: renames,
        },
      }],
    },

  mergeTables():: { transformations+: [{ id: 'merge', options: {} }] },

  // The data source variable every panel's queries go through.
  datasourceVariable(current):: {
    name: 'datasource',
    label: 'Data source',
    type: 'datasource',
    query: 'prometheus',
    regex: '',
    hide: 0,
    refresh: 1,
    current: { selected: true, text: current, value: current },
  },

  // A variable filled from label_values(selector, label).
  queryVariable(name, label, selector, labelName, multi=true, current=null, hide=false)::
    local query = 'label_values(%s, %s)' % [selector, labelName];
    {
      name: name,
      label: label,
      type: 'query',
      datasource: datasource,
      definition: query,
      query: { query: query, refId: 'PrometheusVariableQueryEditor-VariableQuery' },
      refresh: 2,
      sort: 1,
      // 2 hides the variable, as node-mixin hides its cluster variable.
      hide: if hide then 2 else 0,
      regex: '',
      multi: multi,
      includeAll: multi,
      options: [],
    }
    // Grafana's schema has no null allValue nor an empty current: both are
    // left out instead.
    + (if multi then { allValue: '.*' } else {})
    + (if current != null then { current: { selected: true, text: current, value: current } } else {}),

  // Lays panels out left to right on Grafana's 24-column grid, starting a
  // new row when the next panel does not fit, and numbers them from 1.
  layout(panels)::
    local place(acc, p) =
      local w = p.gridPos.w;
      local h = p.gridPos.h;
      local wrap = acc.x + w > 24;
      local x = if wrap then 0 else acc.x;
      local y = if wrap then acc.y + acc.rowH else acc.y;
      {
        x: x + w,
        y: y,
        rowH: if wrap then h else std.max(acc.rowH, h),
        panels: acc.panels + [p { id: std.length(acc.panels) + 1, gridPos: { x: x, y: y, w: w, h: h } }],
      };
    std.foldl(place, panels, { x: 0, y: 0, rowH: 0, panels: [] }).panels,

  dashboard(config, uidSuffix, title, variables, panels):: {
    uid: config.dashboardUIDPrefix + uidSuffix,
    title: config.dashboardNamePrefix + title,
    tags: config.dashboardTags,
    timezone: config.dashboardTimezone,
    refresh: config.dashboardRefresh,
    time: { from: config.dashboardTimeFrom, to: 'now' },
    editable: true,
    graphTooltip: 1,
    schemaVersion: 39,
    annotations: { list: [] },
    links: [],
    templating: { list: variables },
    panels: $.layout(panels),
  },
}
