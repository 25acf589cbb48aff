-- Quarto filter for index.qmd (declared in _quarto.yml), so that `quarto render` and the harness's
-- own renderer (harness/publish/render.py, no Quarto) give the same page:
-- 1. The document's title is the study's: its first level-1 heading (printed by the title cell) is
--    lifted into the title and leaves the body. index.qmd's header carries a placeholder title only
--    because, with none, Quarto's Jupyter engine lifts the first markdown heading instead
--    ("## About this dataset"), which then drops out of the table of contents.
-- 2. A figure cell whose output holds no image (e.g. "One leg only: there is no ratio to plot.") is
--    text, not a figure: it gets no caption and no number, as the harness's renderer does it.

local function first_h1(blocks)
  for i, b in ipairs(blocks) do
    if b.t == "Header" then
      if b.level == 1 then return i end
      return nil
    end
  end
  return nil
end

return {
  {
    FloatRefTarget = function(float)
      if float.type ~= "Figure" then return nil end
      local has_image = false
      pandoc.Div(float.content):walk({ Image = function(_) has_image = true end })
      if has_image then return nil end
      return float.content
    end,
    Pandoc = function(doc)
      local i = first_h1(doc.blocks)
      if i ~= nil then
        doc.meta.title = doc.blocks[i].content
        doc.blocks:remove(i)
      end
      return doc
    end,
  },
}
