// Starts GraphiQL on Causeway's /graphql. The key is given in the headers editor; when the
// explorer (/ui/) has a key in this tab's sessionStorage, the editor starts with it.
// GraphiQL's own state (tabs, and a history of the queries run with their headers, the
// key among them) goes to this tab's sessionStorage too, not to localStorage, where it
// outlived the tab and the explorer's "Forget" (which clears it: api.js).
(function () {
  "use strict";
  // GraphiQL's keys of ``store``, and no other: its "Clear storage" clears only them (given
  // the tab's sessionStorage itself, it cleared the explorer's key too).
  function graphiqlOwn(store) {
    var prefix = "graphiql:";
    function own() {
      return Object.keys(store).filter(function (name) { return name.indexOf(prefix) === 0; });
    }
    return {  // GraphiQL names its keys with the prefix itself
      getItem: function (name) { return store.getItem(name); },
      setItem: function (name, value) { store.setItem(name, value); },
      removeItem: function (name) { store.removeItem(name); },
      clear: function () { own().forEach(function (name) { store.removeItem(name); }); },
      get length() { return own().length; },
    };
  }
  var key = window.sessionStorage.getItem("causeway.key");
  var headers = key ? JSON.stringify({ Authorization: "Bearer " + key }, null, 2) : "";
  var fetcher = GraphiQL.createFetcher({ url: "/graphql" });
  var explorer = GraphiQLPluginExplorer.explorerPlugin();
  var root = ReactDOM.createRoot(document.getElementById("graphiql"));
  root.render(
    React.createElement(GraphiQL, {
      fetcher: fetcher,
      defaultEditorToolsVisibility: true,
      headers: headers || '{"Authorization": "Bearer <your key>"}',
      shouldPersistHeaders: false,
      storage: graphiqlOwn(window.sessionStorage),
      plugins: [explorer],
    })
  );
})();
