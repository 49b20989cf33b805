/* Data Docs without internet: Great Expectations' pages load jQuery and bootstrap-table from
   CDNs and draw their tables with them. When those did not load (no network), this stand-in
   draws the same tables (columns and rows embedded in the page) as plain HTML tables, rows
   clickable as in the original. With the CDN scripts loaded it does nothing. */
(function () {
  if (window.jQuery) return;
  function render(element, options) {
    var columns = (options && options.columns) || [];
    var rows = (options && options.data) || [];
    var head = '<thead><tr>' + columns.map(function (c) { return '<th>' + (c.title || c.field) + '</th>'; }).join('') + '</tr></thead>';
    var body = rows.map(function (row) {
      var link = row._table_row_link_path;
      return '<tr' + (link ? ' class="clickable-row" data-href="' + link + '"' : '') + '>' +
        columns.map(function (c) { var v = row[c.field]; return '<td>' + (v === undefined || v === null ? '' : v) + '</td>'; }).join('') +
        '</tr>';
    }).join('');
    element.innerHTML = head + '<tbody>' + body + '</tbody>';
    element.classList.add('dataflow-offline-table');
    Array.prototype.forEach.call(element.querySelectorAll('tr[data-href]'), function (tr) {
      tr.addEventListener('click', function () { window.location = tr.getAttribute('data-href'); });
    });
  }
  function Wrapped(elements) { this.elements = elements; }
  Wrapped.prototype.bootstrapTable = function (options) {
    if (typeof options === 'object') this.elements.forEach(function (e) { render(e, options); });
    return this;
  };
  ['tooltip', 'popover', 'datepicker', 'on', 'click', 'addClass', 'removeClass', 'toggleClass', 'css', 'show', 'hide', 'each']
    .forEach(function (name) { Wrapped.prototype[name] = function () { return this; }; });
  function $(selector) {
    if (typeof selector === 'function') {
      if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', selector); else selector();
      return new Wrapped([]);
    }
    if (typeof selector !== 'string') return new Wrapped(selector ? [selector] : []);
    try { return new Wrapped(Array.prototype.slice.call(document.querySelectorAll(selector))); }
    catch (e) { return new Wrapped([]); }
  }
  $.fn = Wrapped.prototype;
  window.$ = window.jQuery = $;
  document.addEventListener('DOMContentLoaded', function () { document.body.classList.add('dataflow-offline'); });
})();
