// Starts GraphiQL on Causeway's /graphql. The key is given in the headers editor; when the
// explorer (/ui/) has a key in this tab's sessionStorage, the editor starts with it.
(function () {
  "use strict";
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
      plugins: [explorer],
    })
  );
})();
