// _config durations turned into numbers, for the PromQL functions that take
// seconds (predict_linear's horizon): Prometheus 2's PromQL has no duration
// arithmetic.
{
  // seconds(field, '24h') is 86400: a whole positive number and one unit of
  // s, m, h, d or w, which is all a _config duration needs; field names the
  // setting in the error.
  seconds(field, d)::
    local units = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 };
    local n = std.length(d);
    local nonDigits = [ch for ch in std.stringChars(d[0:n - 1]) if !std.member('0123456789', ch)];
    if n < 2 || nonDigits != [] || !std.objectHas(units, d[n - 1]) || std.parseInt(d[0:n - 1]) == 0
    then error '%s: duration %s: want a whole positive number and one unit of s, m, h, d or w' % [field, d]
    else std.parseInt(d[0:n - 1]) * units[d[n - 1]],
}
